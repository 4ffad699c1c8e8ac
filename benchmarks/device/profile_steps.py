"""Where a training step's time goes on this device, step by step.

    python -m benchmarks.device.profile_steps [score_train | speech_train]

Times each step (synchronised) with 8 loader workers and with none, then profiles 6 steps with
torch.profiler and prints its table. On the H200 of docs/gpu-runs.md this showed the 8 workers
stalling every other step (benchmarks/results/h200/profile_score.txt).
"""

from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.train_step import measure
from sonfolio.config.params import load_params
from sonfolio.train import timing


def timed_steps() -> list[float]:
    """Wrap StepTimer so that each step's synchronised wall time (ms) lands in the list."""
    walls: list[float] = []
    start, end = timing.StepTimer.start_step, timing.StepTimer.end_step

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def start_step(self: timing.StepTimer, step: int) -> None:
        sync()
        self._wall = time.perf_counter()  # type: ignore[attr-defined]
        start(self, step)

    def end_step(self: timing.StepTimer, *args: int, **kwargs: int) -> None:
        end(self, *args, **kwargs)
        sync()
        walls.append(round((time.perf_counter() - self._wall) * 1000, 1))  # type: ignore[attr-defined]

    timing.StepTimer.start_step, timing.StepTimer.end_step = start_step, end_step  # type: ignore[method-assign]
    return walls


def main() -> None:
    track = sys.argv[1] if len(sys.argv) > 1 else "score_train"
    params = load_params()
    opts = params.engine_options("default")
    walls = timed_steps()
    for workers in (8, 0):
        walls.clear()
        began = time.time()
        run = measure(track, params, 12, opts.model_copy(update={"loader_workers": workers}))
        print(
            f"{track} workers={workers}: step_ms {run['step_time']['step_ms']} per step {walls} "
            f"total {time.time() - began:.1f} s",
            flush=True,
        )
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        measure(track, params, 6, opts.model_copy(update={"loader_workers": 0}))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
