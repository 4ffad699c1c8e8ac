"""Optional speed-ups, each applied or skipped with its reason: gradient checkpointing, FP8
matmuls (torchao), torch.compile, the optimizer (fused AdamW, 8-bit AdamW), DataLoader workers.

A speed-up that cannot run here falls back loudly (logged with why) instead of failing the run:
it changes how fast the model trains, not what it learns.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from sonfolio.train.device import Backend

log = logging.getLogger(__name__)

FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper have FP8 tensor cores


def gradient_checkpointing(model: nn.Module, enabled: bool) -> str:
    if not enabled:
        return "off (train_engine.gradient_checkpointing: false)"
    # non-reentrant: works with frozen inputs and with torch.compile
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return "on: activations recomputed in backward (less memory, ~30% more compute)"


def fp8(model: nn.Module, enabled: bool, backend: Backend) -> str:
    """Swap eligible nn.Linear layers for torchao's float8 training linears."""
    if not enabled:
        return "off (train_engine.fp8: false)"
    if backend.kind != "cuda" or (backend.capability or (0, 0)) < FP8_MIN_CAPABILITY:
        return f"skipped: {backend.name} has no FP8 tensor cores (CUDA capability >= 8.9 needed)"
    from torchao.float8 import convert_to_float8_training

    def eligible(module: nn.Module, fqn: str) -> bool:
        # float8 matmuls need both dims divisible by 16; the output head stays in bf16
        return (
            isinstance(module, nn.Linear)
            and module.in_features % 16 == 0
            and module.out_features % 16 == 0
            and "proj_out" not in fqn
            and "output_projection" not in fqn
        )

    convert_to_float8_training(model, module_filter_fn=eligible)
    return "on: torchao float8 training for linear layers with dims divisible by 16"


def compile_model(
    model: nn.Module, enabled: bool, probe: Callable[[nn.Module], None]
) -> tuple[nn.Module, str]:
    """torch.compile, checked on a real forward/backward (`probe`); eager if that fails."""
    if not enabled:
        return model, "off (train_engine.compile: false)"
    compiled = torch.compile(model)
    try:
        probe(compiled)
    except Exception as err:  # inductor raises many types; any of them means: run eager
        log.warning("torch.compile failed, training eager instead: %s", err)
        return model, f"fallback to eager: {type(err).__name__}: {str(err)[:200]}"
    return compiled, "on: torch.compile (inductor)"


def optimizer(
    model: nn.Module, name: str, lr: float, weight_decay: float, backend: Backend
) -> tuple[torch.optim.Optimizer, str]:
    """AdamW with weight decay on matrices only (not on biases and norms)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    if name == "adamw_8bit":
        if backend.kind == "cuda" and importlib.util.find_spec("bitsandbytes") is not None:
            import bitsandbytes as bnb

            return bnb.optim.AdamW8bit(groups, lr=lr), "8-bit AdamW (bitsandbytes)"
        why = "no CUDA device" if backend.kind != "cuda" else "bitsandbytes is not installed"
        log.warning("train_engine.optimizer = adamw_8bit: %s; using AdamW", why)
        fallback = f"AdamW: adamw_8bit unavailable ({why}; `pip install bitsandbytes` on CUDA)"
    else:
        fallback = None
    if backend.is_gpu:
        return torch.optim.AdamW(groups, lr=lr, fused=True), fallback or "AdamW, fused kernel"
    return torch.optim.AdamW(groups, lr=lr, foreach=True), fallback or "AdamW, foreach (CPU)"


def loader_workers(
    configured: int | str,
    backend: Backend,
    decoded_gib: float | None = None,
    preload_max_gib: float = 8.0,
) -> tuple[int, bool, str]:
    """(DataLoader worker processes, preload decoded samples into memory first, reason).

    auto: decode every sample once into memory, with no workers, when the decoded train and val
    sets (`decoded_gib`, None: not known) fit in `preload_max_gib`; else decode per step, in
    workers on a GPU. Measured on an H200 (docs/gpu-runs.md): 8 workers decoding score batches
    stalled every other step (229 ms a step, 25-30 ms without the stall), decoding in the main
    process took 48 of its 88 ms; the GPU itself ran ~6 ms of each step."""
    if configured != "auto":
        return int(configured), False, "as configured"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # on a CPU, the main process decodes what does not fit: measured on 2 cores, a worker
    # process decoding beside the step's OpenMP threads made steps 2-3x slower (oversubscription)
    n = max(1, min(8, (cores or 2) // 2)) if backend.is_gpu else 0
    otherwise = (
        f"{n} workers ({cores} cores / 2, at most 8), pinned memory"
        if n
        else f"decoded per step in the main process (CPU, {cores} cores)"
    )
    limit = f"train_engine.preload_max_gib {preload_max_gib:g}"
    if decoded_gib is None:  # `sonfolio doctor`: the rule, before any data is read
        rule = f"decoded once into memory when train + val fit in {limit}, else {otherwise}"
        return n, False, rule
    if decoded_gib <= preload_max_gib:
        return 0, True, f"samples decoded once into memory ({decoded_gib:.2f} GiB <= {limit})"
    return n, False, f"decoded set {decoded_gib:.2f} GiB > {limit}: {otherwise}"


def decoded_gib(*datasets: Any) -> float:
    """Memory the decoded samples of `datasets` would take in RAM: the arrays of the first
    readable sample of each, times its length (every sample of a set has one input shape:
    images padded to one size, audio features to Whisper's 30-s window)."""
    total = 0
    for dataset in datasets:
        for i in range(min(len(dataset), 8)):
            item = dataset[i]
            if "error" not in item:
                total += len(dataset) * sum(_nbytes(v) for v in item.values())
                break
    return total / 2**30


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    return int(getattr(value, "nbytes", 0))
