"""On a GPU: the engine picks bf16/fp16, TF32, fused AdamW, FP8 where the GPU has it, and the
automatic micro-batch runs real steps. Skipped, with the reason, where no GPU is present."""

from __future__ import annotations

import pytest
import torch
from tiny import run_tiny

from sonfolio.train.device import choose_precision, detect_backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU"),
]


def test_gpu_precision_is_mixed():
    precision, reason = choose_precision("auto", detect_backend())
    assert precision in ("bf16", "fp16"), reason


def test_tiny_run_on_gpu_with_every_option(score_data, tmp_path):
    engine = {"micro_batch": "auto", "compile": True, "fp8": True, "gradient_checkpointing": True}
    metrics = run_tiny(score_data, tmp_path, max_steps=4, engine=engine)
    choices = metrics["choices"]
    assert "fused" in choices["optimizer"] or "8-bit" in choices["optimizer"]
    assert "TF32" in choices["matmul"]
    assert metrics["gpu_mem_peak_gib"] > 0
    cap = torch.cuda.get_device_capability()
    assert ("on:" in choices["fp8"]) == (torch.version.hip is None and cap >= (8, 9))
