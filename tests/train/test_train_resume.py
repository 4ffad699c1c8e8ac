"""A run killed mid-training (SIGKILL) and started again ends with the same weights as a run
that was never interrupted; two data-parallel processes (gloo, CPU) compute the same losses
as one process at the same effective batch."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import subprocess_env

pytestmark = pytest.mark.slow

TINY = Path(__file__).with_name("tiny.py")
LOOP = {"max_steps": 12, "checkpoint_every": 3, "eval_every": 6, "log_every": 1}


def start(data: Path, out: Path, loop: dict, *launcher: str) -> subprocess.Popen:
    cmd = [*launcher] if launcher else [sys.executable]
    return subprocess.Popen(
        [*cmd, str(TINY), str(data), str(out), "--loop", json.dumps(loop)],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> None:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model" / "model.safetensors"))


def train_losses(out: Path) -> list[float]:
    rows = (out / "live" / "plots" / "metrics" / "train" / "loss.tsv").read_text().splitlines()
    return [float(r.split("\t")[1]) for r in rows[1:]]


def test_sigkill_then_rerun_gives_the_uninterrupted_weights(score_data, tmp_path):
    finish(start(score_data, tmp_path / "straight", LOOP))
    crashed = tmp_path / "crashed"
    proc = start(score_data, crashed, LOOP)
    deadline = time.monotonic() + 240
    while not list((crashed / "checkpoints" / "score_train").glob("*/step-00000006")):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no checkpoint at step 6"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (crashed / "model").exists()  # nothing that looks finished
    finish(start(score_data, crashed, LOOP))
    metrics = json.loads((crashed / "metrics.json").read_text())
    assert metrics["resumed"] is True
    a, b = weights(tmp_path / "straight"), weights(crashed)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    assert train_losses(crashed)[-1] == pytest.approx(train_losses(tmp_path / "straight")[-1])


def test_two_processes_match_one_at_the_same_effective_batch(score_data, tmp_path):
    # without dropout: each process draws its own masks, so only the arithmetic can match
    loop = {**LOOP, "max_steps": 4, "eval_every": 4, "checkpoint_every": 100}
    loop["model"] = {"dropout": 0.0}
    # one process: micro-batches of 4, accumulated twice; two: one micro-batch of 4 each
    one = {**loop, "engine": {"micro_batch": 4}}
    finish(start(score_data, tmp_path / "one", one))
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun is installed with torch"
    two = start(
        score_data, tmp_path / "two", loop, torchrun, "--nproc_per_node=2", "--master_port=29533"
    )
    finish(two)
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["micro_batch"] == 4
    assert metrics["grad_accumulation"] == 1
    assert train_losses(tmp_path / "two") == pytest.approx(train_losses(tmp_path / "one"), rel=1e-4)
