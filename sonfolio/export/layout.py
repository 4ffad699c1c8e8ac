"""The layout of a track's export: its variant names, and the ONNX files a variant folder holds.

A variant folder is what optimum's ORTModel loads as is: `encoder_model.onnx`,
`decoder_model_merged.onnx`, config.json, generation_config.json, tokenizer and processor, and
a model card. This module names those files and loads, checks, sizes and copies them. It
imports only the standard library until a file is loaded (onnx then), so the runtimes that
only read a folder (the bench's worker processes, sonfolio.infer.ortloop, sonfolio.variants)
stay light.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

    from sonfolio.config.export import Export

ENCODER = "encoder_model.onnx"
DECODER = "decoder_model_merged.onnx"  # the first step and the steps with past, one file
ONNX_FILES = (ENCODER, DECODER)  # what ORTModel loads from a variant folder
UNMERGED = ("decoder_model.onnx", "decoder_with_past_model.onnx")  # optimum's other layout
# the merged decoder with its with-past branch's self-attention fused, for every step of the
# ORT loop: the export writes it beside optimum's files (sonfolio.export.decoder_step.
# write_fused), so the loop opens it as it is; optimum never reads it, and a folder without it
# has it built at opening
DECODER_FUSED = "decoder_fused_model.onnx"
# files that hold the merged decoder's weights again: DECODER_FUSED, and the with-past step
# alone that earlier exports wrote (no runtime reads it now)
DERIVED = (DECODER_FUSED, "decoder_step_model.onnx")


class OnnxFileError(ValueError):
    """An ONNX file of a variant folder is missing or unreadable; the message names it."""


def load_onnx(path: Path) -> onnx.ModelProto:
    """Load and check one ONNX file.

    Raises:
        OnnxFileError: naming the file, when it is missing, not ONNX, or fails onnx.checker.
    """
    import onnx

    if not path.is_file():
        raise OnnxFileError(f"{path} is missing: rerun the export stage that writes it")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as err:  # onnx raises DecodeError, ValidationError, ...: all mean "bad"
        raise invalid_file(path, err) from None
    return model


def check_onnx(path: Path) -> None:
    """Check one ONNX file as `load_onnx` does, without building its proto in Python: onnx's
    checker reads the file in C++ (a runtime that opens the file itself then holds no second
    copy of the weights in Python's heap).

    Raises:
        OnnxFileError: naming the file, when it is missing, not ONNX, or fails onnx.checker.
    """
    import onnx

    if not path.is_file():
        raise OnnxFileError(f"{path} is missing: rerun the export stage that writes it")
    try:
        onnx.checker.check_model(str(path))
    except Exception as err:  # as in load_onnx
        raise invalid_file(path, err) from None


def invalid_file(path: Path, err: Exception) -> OnnxFileError:
    """The error for an ONNX file that onnx or ONNX Runtime cannot read, naming it and the fix."""
    return OnnxFileError(
        f"{path} is not a valid ONNX model ({type(err).__name__}: {err}); rerun the export "
        "stage that writes it"
    )


def validate_variant(folder: Path) -> None:
    """Check that a variant folder holds readable ONNX files before a runtime opens it.

    Raises:
        OnnxFileError: naming the missing or corrupt file.
    """
    for name in ONNX_FILES:
        check_onnx(folder / name)


def file_sizes(folder: Path) -> dict[str, Any]:
    """Bytes of each ONNX file and their total."""
    files = {name: (folder / name).stat().st_size for name in ONNX_FILES}
    return {"files": files, "bytes": sum(files.values())}


def copy_companions(src: Path, dst: Path) -> None:
    """config.json, generation_config.json, tokenizer, processor: everything but ONNX/README."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.is_file() and path.suffix != ".onnx" and path.name != "README.md":
            shutil.copy2(path, dst / path.name)


def variant_names(cfg: Export) -> list[str]:
    """Every variant a track can have, in report order."""
    return ["fp32", *(f"{q}_{s}" for s in ("ptq", "qat") for q in cfg.quantize)]
