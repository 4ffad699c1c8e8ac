"""The micro-batch size: as configured, or the largest that runs a real training step, cached.

Accelerate's `find_executable_batch_size` does the search (it retries on out-of-memory errors,
whatever the backend's wording); this module picks the candidates (divisors of the batch each
process needs, so gradient accumulation reaches the effective batch exactly), runs the real
step, and caches the answer per device, model, input shape and precision in a JSON file, so a
rerun or a resumed run does not search again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from accelerate import Accelerator
from accelerate.utils import find_executable_batch_size

from sonfolio.io import write_json
from sonfolio.train.device import Backend
from sonfolio.train.samples import model_inputs

if TYPE_CHECKING:
    from sonfolio.config.train import EngineOptions

log = logging.getLogger(__name__)


def divisors_down(n: int) -> list[int]:
    """Divisors of n, largest first."""
    return [d for d in range(n, 0, -1) if n % d == 0]


def search(try_step: Callable[[int], None], per_process: int) -> int:
    """The largest divisor of `per_process` for which `try_step(micro_batch)` does not run out
    of memory. Other errors propagate."""
    candidates = divisors_down(per_process)
    # halve (or take the next divisor below half): out-of-memory retries are slow, so few tries
    state = {"i": 0}

    def next_size() -> int:
        current = candidates[state["i"]]
        smaller = [j for j, d in enumerate(candidates) if d <= current // 2]
        state["i"] = smaller[0] if smaller else len(candidates) - 1
        if candidates[state["i"]] == current:
            return 0  # nothing smaller fits: find_executable_batch_size raises
        log.info("micro-batch %d ran out of memory; trying %d", current, candidates[state["i"]])
        return candidates[state["i"]]

    @find_executable_batch_size(starting_batch_size=per_process, reduce_batch_size_fn=next_size)
    def probe(micro_batch: int) -> int:
        try_step(micro_batch)
        return micro_batch

    return probe()


def auto_micro_batch(
    try_step: Callable[[int], None], per_process: int, cache: Path, key: str
) -> tuple[int, str]:
    """(micro-batch, reason): from the cache, or searched with real steps and cached."""
    known = json.loads(cache.read_text()) if cache.is_file() else {}
    if key in known:
        return known[key], f"cached in {cache} for {key}"
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):  # probe steps must not move the training RNG
        found = search(try_step, per_process)
    write_json(cache, {**known, key: found})
    return found, f"largest divisor of {per_process} that ran a real step ({key}; cached)"


def fixed_micro_batch(
    opts: EngineOptions, per_process: int, backend: Backend
) -> tuple[int, str] | None:
    """(micro-batch, reason) where train_engine.micro_batch or the device decides it without a
    search; None where real steps must find it (auto on a GPU).

    Raises:
        ValueError: a configured micro-batch that does not divide the per-process batch.
    """
    if opts.micro_batch == "full":
        return per_process, "the whole per-process batch (train_engine.micro_batch: full)"
    if isinstance(opts.micro_batch, int):
        if per_process % opts.micro_batch:
            raise ValueError(
                f"train_engine.micro_batch = {opts.micro_batch} does not divide the "
                f"{per_process} samples per process and step: pick a divisor, or auto"
            )
        return opts.micro_batch, "as configured"
    if not backend.is_gpu:
        return per_process, "CPU: memory is not the limit, so the whole per-process batch"
    return None


def probed_micro_batch(
    model: torch.nn.Module,
    probe_batch: Callable[[int], dict[str, Any]],
    acc: Accelerator,
    per_process: int,
    cache: Path,
    key: str,
) -> tuple[int, str]:
    """(micro-batch, reason): the largest that runs a forward and backward of `model` on
    `probe_batch(n)` (n copies of the longest sample), cached under `key`."""
    model = model.to(acc.device)

    def try_step(n: int) -> None:
        batch = {k: v.to(acc.device) for k, v in model_inputs(probe_batch(n)).items()}
        with acc.autocast():
            model(**batch).loss.backward()
        model.zero_grad(set_to_none=True)

    return auto_micro_batch(try_step, per_process, cache, key)
