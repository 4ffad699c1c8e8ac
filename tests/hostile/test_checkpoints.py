"""A training checkpoint folder is untrusted input: a pickle planted in any of its files runs
no code on resume, a damaged newest checkpoint falls back to the one before (and says which,
and why), and what resume restores is exactly what was saved."""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from transformers import get_cosine_schedule_with_warmup

from sonfolio.io import file_sha256
from sonfolio.train import checkpoint

LOG = "sonfolio.train.checkpoint"


class Plant:
    """Unpickling this creates `marker`: what an attacker's file would do, harmlessly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


class Job:
    """A tiny model, optimizer and scheduler prepared by Accelerate, as sonfolio.train.run does."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.acc = Accelerator(cpu=True, rng_types=[])
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 4)
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        self.scheduler = get_cosine_schedule_with_warmup(opt, 2, 20)
        self.model, self.opt = self.acc.prepare(model, opt)

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            loss = self.model(torch.randn(5, 8)).pow(2).mean()  # dropout draws the torch RNG
            self.acc.backward(loss)
            self.opt.step()
            self.scheduler.step()
            self.opt.zero_grad()

    def save(self, folder: Path, step: int) -> Path:
        return checkpoint.save(self.acc, folder, step, {"step": step}, 2, self.scheduler)

    def load(self, folder: Path):
        return checkpoint.load_newest(self.acc, folder, self.scheduler)

    def snapshot(self) -> dict:
        """Everything resume must restore: weights, optimizer moments, lr, every RNG's next draw."""
        rng = (torch.get_rng_state(), random.getstate(), np.random.get_state())
        draws = (torch.rand(3).tolist(), random.random(), np.random.rand())
        torch.set_rng_state(rng[0]), random.setstate(rng[1]), np.random.set_state(rng[2])
        moments = [s["exp_avg"].clone() for s in self.opt.state_dict()["state"].values()]
        weights = {k: v.clone() for k, v in self.model.state_dict().items()}
        return {"w": weights, "m": moments, "lr": self.scheduler.get_last_lr(), "draws": draws}


def same(a: dict, b: dict) -> bool:
    return (
        a["w"].keys() == b["w"].keys()
        and all(torch.equal(a["w"][k], b["w"][k]) for k in a["w"])
        and all(torch.equal(x, y) for x, y in zip(a["m"], b["m"], strict=True))
        and a["lr"] == b["lr"]
        and a["draws"] == b["draws"]
    )


@pytest.fixture
def saved(tmp_path):
    """Checkpoints at steps 3 and 6 and the state at each, in a run folder."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    job = Job()
    job.step(3)
    job.save(folder, 3)
    at3 = job.snapshot()
    job.step(3)
    job.save(folder, 6)
    return {"folder": folder, "at3": at3, "at6": job.snapshot()}


def plant(ckpt: Path, name: str, marker: Path) -> None:
    """A malicious pickle (torch.save's zip format) as `name`, its sha256 recorded in the state
    file as an attacker who can write the folder would."""
    torch.save({"state": Plant(marker)}, ckpt / name)
    record = json.loads((ckpt / checkpoint.STATE_FILE).read_text())
    record["_checkpoint"]["files"][name] = file_sha256(ckpt / name)
    (ckpt / checkpoint.STATE_FILE).write_text(json.dumps(record))


def test_a_checkpoint_holds_no_pickle_but_the_tensor_only_optimizer_state(saved):
    newest = checkpoint.latest(saved["folder"])
    names = sorted(p.name for p in newest.iterdir())
    assert names == [
        "model.safetensors",
        "optimizer.pt",
        "rng_0.json",
        "rng_0.safetensors",
        "states.json",
        checkpoint.STATE_FILE,
    ]
    torch.load(newest / "optimizer.pt", weights_only=True)  # tensors and numbers only


def test_resume_restores_exactly_what_was_saved(saved):
    job = Job()
    path, loop = job.load(saved["folder"])
    assert path.name == "step-00000006" and loop == {"step": 6}
    assert same(job.snapshot(), saved["at6"])
    assert not same(saved["at3"], saved["at6"])  # the comparison tells states apart


def test_the_plant_runs_code_when_unpickled_unsafely(tmp_path):
    """The control: a missing marker below means the loader refused it, not a dud plant."""
    torch.save({"state": Plant(tmp_path / "marker")}, tmp_path / "x.pt")
    torch.load(tmp_path / "x.pt", weights_only=False)
    assert (tmp_path / "marker").exists()


# Files this module reads (a plant makes the checkpoint unusable: the one before is used), and
# files Accelerate's save_state wrote (and load_state unpickled): never read now.
READ = ["model.safetensors", "optimizer.pt", "states.json", "rng_0.safetensors", "rng_0.json"]
LEGACY = ["custom_checkpoint_0.pkl", "random_states_0.pkl", "scheduler.bin", "scaler.pt"]


@pytest.mark.parametrize("name", READ + LEGACY + [checkpoint.STATE_FILE])
def test_a_pickle_planted_in_a_checkpoint_runs_nothing_on_resume(saved, tmp_path, name, caplog):
    marker = tmp_path / "marker"
    newest = checkpoint.latest(saved["folder"])
    if name == checkpoint.STATE_FILE:
        torch.save({"state": Plant(marker)}, newest / name)
    else:
        plant(newest, name, marker)
    job = Job()
    with caplog.at_level(logging.WARNING, logger=LOG):
        path, _ = job.load(saved["folder"])
    assert not marker.exists()
    if name in LEGACY:  # not read: the newest checkpoint resumes as saved
        assert path == newest and same(job.snapshot(), saved["at6"])
    else:  # refused: the one before, and the log says which file and why
        assert path.name == "step-00000003" and same(job.snapshot(), saved["at3"])
        assert name in caplog.text and str(newest) in caplog.text


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("model.safetensors", "truncate"),
        ("model.safetensors", "truncate, hash updated"),
        ("optimizer.pt", "garbage"),
        ("optimizer.pt", "garbage, hash updated"),
        ("rng_0.json", "truncate, hash updated"),
    ],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(saved, name, damage, caplog):
    newest = checkpoint.latest(saved["folder"])
    target = newest / name
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2] if "truncate" in damage else b"\x00garbage" * 64)
    if "hash updated" in damage:  # past the hash: the format's own check must refuse it
        record = json.loads((newest / checkpoint.STATE_FILE).read_text())
        record["_checkpoint"]["files"][name] = file_sha256(target)
        (newest / checkpoint.STATE_FILE).write_text(json.dumps(record))
    job = Job()
    with caplog.at_level(logging.WARNING, logger=LOG):
        path, loop = job.load(saved["folder"])
    assert path.name == "step-00000003" and loop == {"step": 3}
    assert same(job.snapshot(), saved["at3"])
    assert f"checkpoint {newest} not resumed from ({name}" in caplog.text


def test_when_no_checkpoint_loads_nothing_is_changed(saved):
    for ckpt in checkpoint.complete(saved["folder"]):
        (ckpt / "optimizer.pt").write_bytes(b"not a torch file")
    job = Job()
    before = {k: v.clone() for k, v in job.model.state_dict().items()}
    assert job.load(saved["folder"]) is None
    after = job.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_checkpoint_from_accelerates_pickle_layout_is_not_read(tmp_path, caplog):
    """A folder written by the old code (Accelerate's save_state, scheduler pickled and read
    back with weights_only=False) is skipped with the reason; its pickles never run."""
    job = Job()
    job.acc.register_for_checkpointing(job.scheduler)
    old = tmp_path / "ckpt" / "step-00000003"
    job.acc.save_state(str(old), safe_serialization=True)
    (old / checkpoint.STATE_FILE).write_text(json.dumps({"step": 3}))
    marker = tmp_path / "marker"
    for name in ("custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin"):
        torch.save({"state": Plant(marker)}, old / name)
    with caplog.at_level(logging.WARNING, logger=LOG):
        assert Job().load(tmp_path / "ckpt") is None
    assert not marker.exists()
    assert "older layout" in caplog.text
    shutil.rmtree(old)
