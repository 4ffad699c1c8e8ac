"""Where a training step's wall time goes: data wait, forward, backward, optimizer, other.

Written here because no library gives this split per step (torch.profiler traces kernels, not
the phases of a training loop). `other` is the step's wall time minus the four phases: logging,
the NaN guard, the progress bar, Python overhead. On a GPU the phases are bounded by
`torch.cuda.synchronize()` so that queued kernels are charged to the phase that launched them;
that costs a little overlap, which is why it is only done on sampled steps (`sync_every`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

PHASES = ("data_wait", "forward", "backward", "optimizer")


class StepTimer:
    """Accumulates phase times over steps; `summary()` gives ms per step and % of step time."""

    def __init__(self, device: torch.device, sync_every: int = 10) -> None:
        self._cuda = device.type == "cuda"
        self._sync_every = sync_every
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._step_total = 0.0
        self._steps = 0
        self._samples = self._tokens = 0
        self._step_start: float | None = None
        self._sync = False

    def _now(self) -> float:
        if self._sync:
            torch.cuda.synchronize()
        return time.perf_counter()

    def start_step(self, step: int) -> None:
        self._sync = self._cuda and step % self._sync_every == 0
        self._step_start = self._now()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self._now()
        try:
            yield
        finally:
            self._totals[name] += self._now() - start

    def end_step(self, samples: int = 0, tokens: int = 0) -> None:
        """Close the step; `samples` and `tokens` it trained on (all processes) count towards
        `throughput()`."""
        assert self._step_start is not None, "end_step() without start_step()"
        self._step_total += self._now() - self._step_start
        self._steps += 1
        self._samples += samples
        self._tokens += tokens
        self._step_start = None

    def reset(self) -> None:
        """Forget what was measured (after warm-up steps, whose compile time would dominate)."""
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._step_total, self._steps = 0.0, 0
        self._samples = self._tokens = 0

    @property
    def steps(self) -> int:
        return self._steps

    def throughput(self) -> dict[str, float]:
        """samples/s and tokens/s over every step since the last reset (one step's own speed
        swings with its batch's label lengths and with the machine's load)."""
        if not self._step_total:
            return {"samples_per_s": 0.0, "tokens_per_s": 0.0}
        return {
            "samples_per_s": self._samples / self._step_total,
            "tokens_per_s": self._tokens / self._step_total,
        }

    def summary(self) -> dict[str, float]:
        """`<phase>_ms` (per step) and `<phase>_pct` (of step time) for the four phases and
        `other`, plus `step_ms`."""
        if not self._steps:
            return {}
        out: dict[str, float] = {"step_ms": round(1000 * self._step_total / self._steps, 2)}
        other = self._step_total - sum(self._totals.values())
        for name, total in [*self._totals.items(), ("other", max(other, 0.0))]:
            out[f"{name}_ms"] = round(1000 * total / self._steps, 2)
            out[f"{name}_pct"] = round(100 * total / self._step_total, 2)
        return out
