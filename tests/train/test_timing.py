"""The step timer: the phase breakdown and the throughput over a window of steps."""

from __future__ import annotations

import torch

from sonfolio.train.timing import StepTimer


def _clock(monkeypatch, times):
    """The timer reads these instants in turn (its own clock only, not the process's)."""
    ticks = iter(times)
    monkeypatch.setattr(StepTimer, "_now", lambda self: next(ticks))


def test_throughput_is_the_window_mean_not_the_last_step(monkeypatch):
    # step 1: 1.0 s, 32 samples; step 2: 3.0 s, 32 samples -> 64 / 4 s = 16 samples/s
    # (the last step alone would say 10.7); each step: start, data_wait start/end, end
    _clock(monkeypatch, [0.0, 0.0, 0.1, 1.0, 1.0, 1.0, 1.5, 4.0])
    timer = StepTimer(torch.device("cpu"))
    for step, tokens in ((1, 100), (2, 300)):
        timer.start_step(step)
        with timer.phase("data_wait"):
            pass
        timer.end_step(32, tokens)
    assert timer.throughput() == {"samples_per_s": 16.0, "tokens_per_s": 100.0}
    summary = timer.summary()
    assert summary["step_ms"] == 2000.0
    assert summary["data_wait_ms"] == 300.0 and summary["data_wait_pct"] == 15.0
    assert summary["other_pct"] == 85.0


def test_reset_forgets_the_warm_up(monkeypatch):
    _clock(monkeypatch, [0.0, 10.0, 10.0, 11.0])
    timer = StepTimer(torch.device("cpu"))
    timer.start_step(1)
    timer.end_step(32, 10)  # a slow first step (compilation, allocation)
    timer.reset()
    assert timer.throughput() == {"samples_per_s": 0.0, "tokens_per_s": 0.0}
    timer.start_step(2)
    timer.end_step(8, 40)
    assert timer.throughput() == {"samples_per_s": 8.0, "tokens_per_s": 40.0}
    assert timer.steps == 1
