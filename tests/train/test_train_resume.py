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


def start(
    data: Path, out: Path, loop: dict, *launcher: str, extra: tuple[str, ...] = ()
) -> subprocess.Popen:
    cmd = [*launcher] if launcher else [sys.executable]
    return subprocess.Popen(
        [*cmd, str(TINY), str(data), str(out), "--loop", json.dumps(loop), *extra],
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


def torchrun_two(port: int) -> list[str]:
    """torchrun with two CPU processes (gloo) on `port`."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun is installed with torch"
    return [torchrun, "--nproc_per_node=2", f"--master_port={port}"]


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
    # the second process reads the best weights 5 s late: the first, which removes the run's
    # folder once it has saved the model, must wait for it (a race CI once lost)
    two = start(
        score_data,
        tmp_path / "two",
        loop,
        *torchrun_two(29533),
        extra=("--lag", "5"),
    )
    finish(two)
    assert not list((tmp_path / "two" / "checkpoints" / "score_train").glob("*/*"))
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["micro_batch"] == 4
    assert metrics["grad_accumulation"] == 1
    assert train_losses(tmp_path / "two") == pytest.approx(train_losses(tmp_path / "one"), rel=1e-4)


def test_qat_in_two_processes_writes_its_model_and_metrics_once(score_data, tmp_path):
    fp32 = tmp_path / "fp32"
    finish(start(score_data, fp32, {"max_steps": 4, "eval_every": 4}))
    out = tmp_path / "qat"
    loop = {"schemes": ["int8"], "max_steps": 2, "eval_every": 2}
    proc = start(
        score_data,
        out,
        loop,
        *torchrun_two(29534),
        extra=("--qat", str(fp32 / "model"), "--lag", "5"),
    )
    finish(proc)
    # the main process alone writes: the other's empty metrics and folder never replace them
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"int8"} and metrics["int8"]["processes"] == 2
    assert (out / "qat" / "int8" / "model.safetensors").is_file()
    assert not list(out.glob(".qat.tmp-*"))
    assert not list((out / "checkpoints" / "score_qat").glob("*/*/*"))
