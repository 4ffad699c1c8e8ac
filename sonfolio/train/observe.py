"""What a run reports while it trains: throughput, MFU, GPU utilisation and memory, and the
curves DVCLive writes for `dvc plots show`.

MFU (model FLOPs utilisation) = achieved training FLOP/s / the device's dense bf16 peak, with
training FLOPs ~ 6 x parameters x tokens (forward 2, backward 4; attention's quadratic term
left out). Peak numbers are the vendors' dense (no sparsity) bf16/fp16 tensor figures.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import torch

from sonfolio.train.device import Backend

log = logging.getLogger(__name__)

PEAK_TFLOPS = {  # dense bf16 (fp16 on V100/T4), by a substring of torch.cuda.get_device_name
    "H200": 989.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "A100": 312.0,
    "A10G": 125.0,
    "A10": 125.0,
    "L40S": 362.0,
    "L4": 121.0,
    "RTX 4090": 165.0,
    "RTX 3090": 71.0,
    "V100": 125.0,
    "T4": 65.0,
    "MI300X": 1307.0,
    "MI250X": 383.0,
    "MI210": 181.0,
}


def peak_flops(backend: Backend) -> tuple[float | None, str]:
    if not backend.is_gpu:
        return None, "no MFU on CPU (no meaningful peak)"
    for key, tflops in PEAK_TFLOPS.items():
        if key in backend.name:
            return tflops * 1e12, f"{backend.name}: {tflops:g} TFLOP/s dense bf16"
    return None, f"{backend.name} is not in sonfolio.train.observe.PEAK_TFLOPS: no MFU"


def gpu_stats(backend: Backend) -> dict[str, float]:
    """Utilisation (%) and memory (GiB) of the current GPU; {} on CPU.

    NVML through torch (needs `nvidia-ml-py`), rocm-smi on AMD; a missing tool leaves its key
    out rather than failing the run.
    """
    if not backend.is_gpu:
        return {}
    stats = {
        "gpu_mem_gib": round(torch.cuda.memory_allocated() / 2**30, 2),
        "gpu_mem_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }
    try:
        stats["gpu_util_pct"] = float(torch.cuda.utilization())
    except (ModuleNotFoundError, RuntimeError, ValueError):  # no pynvml / amdsmi
        util = rocm_smi_util() if backend.kind == "rocm" else None
        if util is not None:
            stats["gpu_util_pct"] = util
    return stats


def rocm_smi_util() -> float | None:
    tool = shutil.which("rocm-smi")
    if tool is None:
        return None
    res = subprocess.run([tool, "--showuse", "--json"], capture_output=True, text=True, check=False)
    try:
        card = next(iter(json.loads(res.stdout).values()))
        return float(card["GPU use (%)"])
    except (ValueError, KeyError, StopIteration, TypeError):
        return None


class Curves:
    """DVCLive on the main process; every point is also kept in `history`, which the engine
    saves in each checkpoint and replays on resume (DVC deletes the folder before a rerun)."""

    def __init__(self, folder: Path | None, history: list[dict[str, Any]]) -> None:
        self.history = history
        self._live = None
        if folder is None:
            return
        from dvclive import Live

        # dvcyaml=None: the plots are declared in the project's dvc.yaml, not written by DVCLive
        self._live = Live(str(folder), save_dvc_exp=False, dvcyaml=None, report=None)
        for row in history:
            self._write(row)

    def _write(self, row: dict[str, Any]) -> None:
        assert self._live is not None
        self._live.step = row["step"]
        for key, value in row.items():
            if key != "step" and value is not None:
                self._live.log_metric(key, value, timestamp=False)

    def log(self, step: int, **values: float | None) -> None:
        row = {"step": step, **values}
        self.history.append(row)
        if self._live is not None:
            self._write(row)

    def close(self) -> None:
        """Nothing to flush (each point is appended as it is logged). Live.end() is not called:
        it writes a summary JSON beside the curves; the stage's metrics file is the summary."""
        self._live = None
