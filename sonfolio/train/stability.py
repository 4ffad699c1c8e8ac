"""NaN / Inf recovery: skip the step, back the learning rate off, roll back after a streak.

Written here because neither Accelerate nor torch does it: the fp16 loss scaler skips steps
with overflowing gradients, but a NaN loss in bf16 or fp32 (bad sample, lr too high) goes
straight into the weights. The guard looks at the loss and the gradient norm before the
optimizer steps; the engine acts on its verdict and logs every event.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Literal

log = logging.getLogger(__name__)

Verdict = Literal["ok", "skip", "rollback"]


class TrainingDiverged(RuntimeError):
    """Bad steps kept coming after the allowed rollbacks; the message says what to change."""


@dataclass
class NanGuard:
    """Counts non-finite steps; `lr_scale` multiplies the scheduler's learning rate."""

    max_bad_steps: int  # bad steps in a row that trigger a rollback
    lr_backoff: float  # lr_scale is multiplied by this on each bad step
    max_rollbacks: int
    bad_in_row: int = 0
    skipped_steps: int = 0
    rollbacks: int = 0
    lr_scale: float = 1.0

    def check(self, step: int, loss: float, grad_norm: float) -> Verdict:
        if math.isfinite(loss) and math.isfinite(grad_norm):
            self.bad_in_row = 0
            return "ok"
        self.bad_in_row += 1
        self.skipped_steps += 1
        self.lr_scale *= self.lr_backoff
        log.warning(
            "step %d: loss %s, gradient norm %s: step skipped, learning rate x%.3g "
            "(%d bad in a row, %d skipped in all)",
            step,
            loss,
            grad_norm,
            self.lr_scale,
            self.bad_in_row,
            self.skipped_steps,
        )
        if self.bad_in_row < self.max_bad_steps:
            return "skip"
        self.rollbacks += 1
        self.bad_in_row = 0
        if self.rollbacks > self.max_rollbacks:
            raise TrainingDiverged(
                f"step {step}: {self.max_bad_steps} non-finite steps in a row again after "
                f"{self.max_rollbacks} rollback(s): lower the stage's lr, raise "
                "train_engine.grad_clip's strictness (a smaller value), or use precision: fp32"
            )
        log.warning(
            "step %d: rolling back to the last good checkpoint (rollback %d)", step, self.rollbacks
        )
        return "rollback"

    def state(self) -> dict[str, float | int]:
        return asdict(self)

    def load(self, state: dict[str, float | int]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
