"""Automatic micro-batch size: the largest that runs a real training step, cached.

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

import torch
from accelerate.utils import find_executable_batch_size

from sonfolio.io import write_json

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
