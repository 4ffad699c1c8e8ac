"""A disk that cannot hold a run's checkpoints: the run is refused before its first step, or,
when the disk fills during a save, stops naming the checkpoint the rerun resumes from, with
the partial one removed and the complete ones intact."""

from __future__ import annotations

import errno
import shutil
from collections import namedtuple

import pytest
from tiny import run_tiny

from sonfolio.train import checkpoint
from sonfolio.train.checkpoint import CheckpointDiskFull

Usage = namedtuple("Usage", "total used free")


def test_a_run_whose_checkpoints_do_not_fit_stops_before_its_first_step(
    score_data, tmp_path, monkeypatch
):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 10**12, 10**5))
    with pytest.raises(CheckpointDiskFull, match=r"0\.0 GB free.*paths\.checkpoints"):
        run_tiny(score_data, tmp_path, max_steps=4, checkpoint_every=2)
    assert not (tmp_path / "model").exists() and not (tmp_path / "metrics.json").exists()
    assert not list((tmp_path / "checkpoints").rglob("step-*"))  # not one step was spent


def test_a_disk_filling_during_a_save_names_the_checkpoint_the_rerun_resumes_from(
    score_data, tmp_path, monkeypatch
):
    real, calls = checkpoint._write, []

    def fills(acc, tmp, scheduler):
        calls.append(tmp)
        if len(calls) == 2:  # the second save: a file half written, then the disk is full
            (tmp / "model.safetensors").write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        real(acc, tmp, scheduler)

    monkeypatch.setattr(checkpoint, "_write", fills)
    with pytest.raises(CheckpointDiskFull, match="it resumes from step-00000002"):
        run_tiny(score_data, tmp_path, max_steps=6, checkpoint_every=2, eval_every=6)
    [folder] = {p.parent for p in (tmp_path / "checkpoints").rglob("step-*")}  # the run's
    assert [p.name for p in checkpoint.complete(folder)] == ["step-00000002"]
    assert not list(folder.glob(".*.tmp"))  # the partial one removed: its room given back
    monkeypatch.setattr(checkpoint, "_write", real)
    metrics = run_tiny(score_data, tmp_path, max_steps=6, checkpoint_every=2, eval_every=6)
    assert metrics["steps"] == 6 and (tmp_path / "model").is_dir()
