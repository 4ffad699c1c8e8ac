"""Loading a variant folder through torch (a PyTorch folder) or optimum (an ONNX folder that
the ORT loops do not decode): imported by sonfolio.variants when such a folder is opened, so the
ORT-loop path never imports torch or transformers. Also the device choice (torch's and ORT's)
and the file checks whose errors name the file and the fix.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sonfolio import tracks
from sonfolio.export.layout import DECODER, ENCODER, UNMERGED

TORCH_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
# optimum's layouts: a merged decoder, or a decoder + one with past
DECODERS = ((DECODER,), UNMERGED)

log = logging.getLogger(__name__)


class VariantError(ValueError):
    """A variant folder that cannot be loaded; the message names the file and the fix."""


def torch_device(device: str) -> str:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise VariantError("device = cuda but torch sees no GPU: use device auto or cpu")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_torch(folder: Path, track: str, threads: int | None, device: str) -> tuple[Any, str]:
    import torch

    from sonfolio import ctc_head as ctc

    if threads:
        torch.set_num_threads(threads)
    face = tracks.face(track, "export")
    face.register_classes()  # a track's own model classes, if any
    cls = face.torch_model_class()
    from safetensors import SafetensorError

    from sonfolio.io import damaged_safetensors

    try:
        model = ctc.load_head(cls.from_pretrained(str(folder)), folder)
    except SafetensorError as err:  # not an OSError: transformers lets it through as it is
        names = ", ".join(str(p) for p in damaged_safetensors(folder)) or str(folder)
        raise VariantError(
            f"{names}: not a readable safetensors file ({err}): the file is damaged or cut "
            "short; copy the model folder again or rerun the stage that wrote it"
        ) from None
    except (OSError, ValueError, RuntimeError) as err:
        raise VariantError(
            f"{folder}: the PyTorch weights could not be loaded ({err}): re-save the model"
        ) from err
    where = torch_device(device)
    return model.to(where).eval(), where


def provider(device: str) -> str:
    import onnxruntime as ort

    available = ort.get_available_providers()
    has_cuda = "CUDAExecutionProvider" in available
    if device == "cuda" and not has_cuda:
        raise VariantError(
            "device = cuda but onnxruntime has no CUDAExecutionProvider "
            f"(available: {available}): install onnxruntime-gpu, or use device auto or cpu"
        )
    if device in ("auto", "cuda") and has_cuda and sees_gpu():
        return "CUDAExecutionProvider"
    if device == "auto":
        log.info("ONNX Runtime on CPU: CUDAExecutionProvider not available (%s)", available)
    return "CPUExecutionProvider"


def sees_gpu() -> bool:
    """Whether a GPU is there for ORT's CUDA provider, asked of torch (onnxruntime-gpu lists
    the provider whether or not a GPU is present): only where that provider is installed."""
    try:
        import torch
    except ImportError:
        return True  # onnxruntime-gpu without torch: the provider says so itself when it runs
    return torch.cuda.is_available()


def onnx_files(folder: Path) -> list[Path]:
    """The standard files that optimum will load, or an error naming the missing one."""
    if not (folder / ENCODER).is_file():
        raise VariantError(f"{folder / ENCODER} is missing: rerun the export stage")
    for names in DECODERS:
        if all((folder / n).is_file() for n in names):
            return [folder / ENCODER, *(folder / n for n in names)]
    raise VariantError(
        f"{folder / DECODERS[0][0]} is missing (nor {' + '.join(DECODERS[1])}): rerun the "
        "export stage; optimum expects its standard file names"
    )


def load_onnx(folder: Path, track: str, threads: int | None, provider: str) -> Any:
    import onnxruntime as ort

    files = onnx_files(folder)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    face = tracks.face(track, "export")
    face.register_classes()  # optimum reads the model type through transformers' Auto classes
    cls = face.ort_model_class()
    try:
        model = cls.from_pretrained(str(folder), provider=provider, session_options=options)
    except Exception as err:  # onnxruntime raises its own pybind exception types
        bad = unreadable(files)
        if bad is not None:
            raise VariantError(
                f"{bad} is not a readable ONNX model ({err}): rerun the export stage"
            ) from err
        raise VariantError(f"{folder}: ONNX Runtime could not load the model: {err}") from err
    return model


def unreadable(files: list[Path]) -> Path | None:
    """The first file that does not parse as an ONNX model (a protobuf parse, no weights)."""
    import onnx

    for path in files:
        try:
            onnx.load(str(path), load_external_data=False)
        except Exception:  # protobuf's DecodeError and onnx's own errors: any means unreadable
            return path
    return None
