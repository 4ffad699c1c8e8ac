"""Which device trains, in which precision, with which matmul settings; each choice with its
reason, so a run's log and metrics say why it ran as it did.

CUDA and ROCm both appear as `torch.cuda` (ROCm builds set `torch.version.hip`). Accelerate
owns the autocast and the loss scaler; this module only decides what to ask it for.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

import torch

log = logging.getLogger(__name__)

Precision = Literal["auto", "bf16", "fp16", "fp32"]

# ROCm ships kernels for a few gfx targets only; close relatives run them when told to pretend
# (HSA_OVERRIDE_GFX_VERSION). Source: ROCm's GPU support matrix and the community's mapping for
# RDNA2/RDNA3 consumer cards. A target not listed here is either supported or unknown: no override.
HSA_OVERRIDES = {
    "gfx1031": "10.3.0",
    "gfx1032": "10.3.0",
    "gfx1033": "10.3.0",
    "gfx1034": "10.3.0",
    "gfx1035": "10.3.0",
    "gfx1036": "10.3.0",
    "gfx1101": "11.0.0",
    "gfx1102": "11.0.0",
    "gfx1103": "11.0.0",
}


class DeviceCannotDo(ValueError):
    """A configured precision or model size that this device cannot run; says what to change."""


@dataclass(frozen=True)
class Backend:
    kind: Literal["cuda", "rocm", "cpu"]
    name: str  # e.g. "NVIDIA H100 80GB HBM3", "cpu (2 threads)"
    capability: tuple[int, int] | None  # CUDA compute capability; None on CPU and ROCm

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"


def rocm_gfx_targets() -> list[str]:
    """gfx names of the AMD GPUs present, read without initialising HIP (rocm_agent_enumerator)."""
    tool = shutil.which("rocm_agent_enumerator")
    if tool is None:
        return []
    out = subprocess.run([tool], capture_output=True, text=True, timeout=30, check=False).stdout
    return [t for t in out.split() if t.startswith("gfx") and t != "gfx000"]


def hsa_override(targets: list[str], env: dict[str, str]) -> tuple[str | None, str]:
    """The HSA_OVERRIDE_GFX_VERSION value needed for `targets`, with its reason."""
    if "HSA_OVERRIDE_GFX_VERSION" in env:
        return None, f"HSA_OVERRIDE_GFX_VERSION={env['HSA_OVERRIDE_GFX_VERSION']} set by the user"
    needed = {HSA_OVERRIDES[t] for t in targets if t in HSA_OVERRIDES}
    if not needed:
        return None, f"gfx targets {targets or 'unknown'} need no override"
    value = sorted(needed)[0]
    return value, f"{', '.join(targets)} runs the kernels built for {value}"


def detect_backend() -> Backend:
    """The device this process trains on. On ROCm, sets HSA_OVERRIDE_GFX_VERSION first when
    the detected gfx target needs it (it must be set before HIP initialises)."""
    if torch.version.hip is not None:
        value, reason = hsa_override(rocm_gfx_targets(), dict(os.environ))
        if value:
            os.environ["HSA_OVERRIDE_GFX_VERSION"] = value
        log.info("ROCm: HSA_OVERRIDE_GFX_VERSION %s (%s)", value or "not set", reason)
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        if torch.version.hip is not None:
            return Backend("rocm", name, None)
        return Backend("cuda", name, torch.cuda.get_device_capability(index))
    return Backend("cpu", f"cpu ({torch.get_num_threads()} threads)", None)


def bf16_supported(backend: Backend) -> bool:
    return backend.is_gpu and torch.cuda.is_bf16_supported(including_emulation=False)


def choose_precision(requested: Precision, backend: Backend) -> tuple[str, str]:
    """Accelerate's mixed_precision ("bf16", "fp16" or "no") for `requested`, and why.

    Raises:
        DeviceCannotDo: an explicit precision this device cannot train in.
    """
    key = "train_engine.precision (or the preset's)"
    if requested == "auto":
        if not backend.is_gpu:
            return "no", (
                "CPU: fp32 (bf16 autocast is an option, precision: bf16; it ran the score step "
                "1.2x faster on an avx512_bf16 CPU: `python -m benchmarks.train_step --compare`)"
            )
        if bf16_supported(backend):
            return "bf16", f"{backend.name} has bf16: no loss scaling needed"
        return "fp16", f"{backend.name} has no bf16: fp16 with dynamic loss scaling"
    if requested == "fp32":
        return "no", "fp32 as configured"
    if requested == "fp16" and not backend.is_gpu:
        raise DeviceCannotDo(
            f"{key} = fp16, but training runs on the CPU, which has no fp16 loss scaling: set "
            "precision: auto (fp32 here) or fp32, or run on a GPU"
        )
    if requested == "bf16" and backend.is_gpu and not bf16_supported(backend):
        raise DeviceCannotDo(
            f"{key} = bf16, but {backend.name} has no bf16 (it needs NVIDIA Ampere or newer, "
            "or AMD CDNA2 or newer): set precision: auto (fp16 here) or fp16"
        )
    return requested, f"{requested} as configured"


def set_matmul_precision(backend: Backend) -> str:
    """TF32 matmuls and convolutions on GPU ("medium" lets bf16 be used internally too); exact
    fp32 on CPU. Returns the reason."""
    if not backend.is_gpu:
        torch.set_float32_matmul_precision("highest")
        return "CPU: fp32 matmuls (TF32 is a GPU format)"
    torch.set_float32_matmul_precision("medium")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return f"{backend.name}: TF32 matmuls and convolutions, matmul precision 'medium'"
