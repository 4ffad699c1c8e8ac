"""Resumable checkpoints with no pickle that can run code: weights (safetensors), optimizer
state (a tensor-only torch file, read with `weights_only=True`), scheduler, loss scaler and
Python/NumPy RNG states as JSON, torch RNG states as safetensors, the loop's state as JSON.

Why not Accelerate's `save_state`/`load_state`: they pickle the scheduler, scaler and RNG
states, and Accelerate 1.15 reads a registered object (our scheduler) back with
`torch.load(weights_only=False)`, so a file planted in a checkpoint folder ran code on resume.
Here every file is written and read by a loader that cannot build arbitrary objects
(safetensors, JSON, `torch.load(weights_only=True)`), and the loop's state lists the sha256 of
every file so that a damaged file is found before anything is restored.

What is kept from before:
- each checkpoint is written to a hidden temporary folder and renamed into place, so a crash
  mid-write leaves no checkpoint that looks complete (a rename is atomic on one filesystem);
- checkpoints live under `<checkpoints>/<stage>/<fingerprint>/`, outside the stage's DVC outs
  (DVC deletes outs before it reruns a stage). The fingerprint hashes everything that decides
  the run (config, data, tokenizer), so a rerun after a crash resumes only a run that would
  have computed the same thing, and a changed param starts afresh.

Resume takes the newest checkpoint that reads whole: one that fails a check (a hash, a
truncated file, a refused pickle, a file from an older layout) is logged with why and the one
before is tried. Everything is read and checked before any state is changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import save as accelerate_save
from safetensors.torch import load_file, save_file

from sonfolio.io import file_sha256

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"  # written last into the temporary folder
PREFIX = "step-"
LAYOUT = 2  # 1: Accelerate's save_state (pickles); 2: this module's files
STATES_FILE = "states.json"  # scheduler, scaler, Accelerate's step counter


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from (damaged, refused or from another layout)."""


def fingerprint(config: dict[str, Any], files: list[Path]) -> str:
    """A short hash of the run's config and the bytes of its input files."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for path in sorted(files):
        h.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def run_folder(checkpoints: Path, stage: str, key: str) -> Path:
    """Where a run's checkpoints go; git ignores the whole tree (a `.gitignore` in it)."""
    folder = checkpoints / stage / key
    folder.mkdir(parents=True, exist_ok=True)
    ignore = checkpoints / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# resumable training state, never committed\n*\n")
    return folder


def complete(folder: Path) -> list[Path]:
    """The complete checkpoints in `folder` (their state file was written last), oldest first."""
    return sorted(p for p in folder.glob(f"{PREFIX}*") if (p / STATE_FILE).is_file())


def latest(folder: Path) -> Path | None:
    """The newest complete checkpoint in `folder`, or None (it may still fail to load)."""
    done = complete(folder)
    return done[-1] if done else None


def _suffix(i: int) -> str:
    return f"_{i}" if i else ""


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """This process's RNG states: torch's as tensors, Python's and NumPy's as JSON values."""
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda_{i}"] = state
    version, words, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    plain = {
        "python": [version, list(words), gauss],
        "numpy": [name, keys.tolist(), pos, has_gauss, cached],
    }
    return tensors, plain


def _write(acc: Accelerator, tmp: Path, scheduler: Any) -> None:
    """Every process writes its RNG states; the main process the model, optimizer and states."""
    rank = acc.process_index
    tensors, plain = _rng_state()
    save_file(tensors, str(tmp / f"rng_{rank}.safetensors"))
    (tmp / f"rng_{rank}.json").write_text(json.dumps(plain))
    for i, model in enumerate(acc._models):
        # Accelerate's own save: drops the second name of tied weights, as safetensors needs.
        # Unwrapped (no DDP `module.` prefix): a run resumes on any number of processes.
        weights = acc.get_state_dict(model, unwrap=True)
        accelerate_save(weights, tmp / f"model{_suffix(i)}.safetensors", safe_serialization=True)
    if not acc.is_main_process:
        return
    for i, opt in enumerate(acc._optimizers):
        # Tensors, numbers and strings only: read back with weights_only=True, which refuses
        # any other object (torch's allow-list), so this file cannot run code either.
        torch.save(opt.state_dict(), tmp / f"optimizer{_suffix(i)}.pt")
    states = {
        "scheduler": scheduler.state_dict(),
        "scaler": acc.scaler.state_dict() if acc.scaler is not None else None,
        "accelerate_step": acc.step,
    }
    (tmp / STATES_FILE).write_text(json.dumps(states))


KEEP = 2  # complete checkpoints a run keeps (the newest): one survives a crash during a save


class CheckpointDiskFull(RuntimeError):
    """The disk of a run's checkpoint folder has no room for its checkpoints."""


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def room_needed(models: Sequence[torch.nn.Module], keep: int) -> int:
    """Bytes a run's checkpoints take at most: `keep` complete ones and the one being written,
    each the weights as they are stored and AdamW's two fp32 moments per trainable weight."""
    params = [p for model in models for p in model.parameters()]
    one = sum(p.numel() * p.element_size() for p in params)
    one += sum(2 * 4 * p.numel() for p in params if p.requires_grad)
    return (keep + 1) * one


def check_room(folder: Path, models: Sequence[torch.nn.Module], keep: int) -> None:
    """Before a run's first step: refuse one whose checkpoints would fill the disk of `folder`
    on the way (a run that stops at its first full save has spent its time for nothing).

    Raises:
        CheckpointDiskFull: naming the room needed and free, and the fix.
    """
    folder.mkdir(parents=True, exist_ok=True)
    free, need = shutil.disk_usage(folder).free, room_needed(models, keep)
    if free < need:
        raise CheckpointDiskFull(
            f"{folder}: {_gb(free)} free, and this run's checkpoints take up to {_gb(need)} "
            f"({keep} kept and the one being written): free space there, or set "
            "paths.checkpoints in params.yaml to a folder on a larger disk"
        )


def _no_space(err: BaseException) -> bool:
    """A write that ran out of disk: OSError ENOSPC, or safetensors' own error, which carries
    only the OS error's text."""
    text = str(err)
    return getattr(err, "errno", None) == errno.ENOSPC or "os error 28" in text


def save(
    accelerator: Accelerator,
    folder: Path,
    step: int,
    state: dict[str, Any],
    keep: int,
    scheduler: Any,
) -> Path:
    """Save a checkpoint atomically; keep the newest `keep`. Call on every process.

    Raises:
        CheckpointDiskFull: the disk filled while writing; the partial checkpoint is removed
            and the newest complete one is named (the stage rerun resumes from it).
    """
    final = folder / f"{PREFIX}{step:08d}"
    tmp = folder / f".{final.name}.tmp"
    if accelerator.is_main_process:
        if tmp.exists():
            shutil.rmtree(tmp)  # left by a crash during an earlier save
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    try:
        _write(accelerator, tmp, scheduler)
        accelerator.wait_for_everyone()  # every process's files are in before they are listed
        if accelerator.is_main_process:
            files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir())}
            record = {**state, "_checkpoint": {"layout": LAYOUT, "files": files}}
            (tmp / STATE_FILE).write_text(json.dumps(record, indent=1))
    except Exception as err:
        if not _no_space(err):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        done = complete(folder)
        again = f"resumes from {done[-1].name}" if done else "starts afresh: none was complete"
        raise CheckpointDiskFull(
            f"no space left on the disk of {folder} while writing step {step}'s checkpoint "
            f"({_gb(shutil.disk_usage(folder).free)} free with the partial one removed): free "
            f"space there, or set paths.checkpoints to a larger disk, and run the stage again: "
            f"it {again}"
        ) from err
    if accelerator.is_main_process:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in complete(folder)[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


@dataclass
class _Read:
    """A checkpoint read into memory and checked; nothing applied yet."""

    loop: dict[str, Any]
    models: list[dict[str, torch.Tensor]]
    optimizers: list[dict[str, Any]]
    states: dict[str, Any]
    rng: dict[str, torch.Tensor]
    rng_plain: dict[str, Any]


def _read_file(path: Path, files: dict[str, str], how: Any) -> Any:
    """`how(path)` after checking the file's sha256 against the record; any failure is a
    CheckpointError naming the file (the bytes are untrusted: every error means unusable)."""
    want = files.get(path.name)
    if want is None:
        raise CheckpointError(f"{path.name} is not in {STATE_FILE}'s list of files")
    try:
        if file_sha256(path) != want:
            raise CheckpointError(f"{path.name}: sha256 differs from the one recorded")
        return how(path)
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 (safetensors, torch, json: all mean "damaged")
        raise CheckpointError(f"{path.name}: {type(err).__name__}: {err}") from err


def _read(acc: Accelerator, path: Path) -> _Read:
    try:
        loop = json.loads((path / STATE_FILE).read_text())
        record = loop.pop("_checkpoint")
    except (OSError, ValueError, KeyError, AttributeError) as err:
        raise CheckpointError(f"{STATE_FILE}: unreadable or from an older layout ({err})") from err
    if not isinstance(record, dict) or record.get("layout") != LAYOUT:
        raise CheckpointError(f"layout {record.get('layout')!r}, this version reads {LAYOUT}")
    files: dict[str, str] = record["files"]
    rank, n_models, n_opts = acc.process_index, len(acc._models), len(acc._optimizers)

    def torch_weights_only(p: Path) -> Any:
        return torch.load(p, map_location="cpu", weights_only=True)

    def json_file(p: Path) -> Any:
        return json.loads(p.read_text())

    return _Read(
        loop=loop,
        models=[
            _read_file(path / f"model{_suffix(i)}.safetensors", files, load_file)
            for i in range(n_models)
        ],
        optimizers=[
            _read_file(path / f"optimizer{_suffix(i)}.pt", files, torch_weights_only)
            for i in range(n_opts)
        ],
        states=_read_file(path / STATES_FILE, files, json_file),
        rng=_read_file(path / f"rng_{rank}.safetensors", files, load_file),
        rng_plain=_read_file(path / f"rng_{rank}.json", files, json_file),
    )


def _check_keys(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Every weight of `model` is in `weights`, or tied to one that is (saved once)."""
    own = model.state_dict()
    unexpected = sorted(set(weights) - set(own))
    loaded = {own[k].data_ptr() for k in weights if k in own}
    missing = sorted(k for k in own if k not in weights and own[k].data_ptr() not in loaded)
    if unexpected or missing:
        raise CheckpointError(
            f"the weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )


def _apply(acc: Accelerator, read: _Read, scheduler: Any) -> None:
    for model, weights in zip(acc._models, read.models, strict=True):
        acc.unwrap_model(model).load_state_dict(
            weights, strict=False
        )  # tied names: checked by _check_keys
    for opt, state in zip(acc._optimizers, read.optimizers, strict=True):
        opt.load_state_dict(state)
    scheduler.load_state_dict(read.states["scheduler"])
    if acc.scaler is not None and read.states["scaler"] is not None:
        acc.scaler.load_state_dict(read.states["scaler"])
    acc.step = read.states["accelerate_step"]
    version, words, gauss = read.rng_plain["python"]
    random.setstate((version, tuple(words), gauss))
    name, keys, pos, has_gauss, cached = read.rng_plain["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(read.rng["torch"])
    cuda = [read.rng[k] for k in sorted(read.rng) if k.startswith("cuda_")]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def _agreed(acc: Accelerator, ok: bool) -> bool:
    """Whether every process read the checkpoint (they must all resume from the same one)."""
    if acc.num_processes == 1:
        return ok
    flags = acc.gather(torch.tensor([int(ok)], device=acc.device))
    return bool(flags.min().item())


def load_newest(
    accelerator: Accelerator, folder: Path, scheduler: Any, skip: Sequence[Path] = ()
) -> tuple[Path, dict[str, Any]] | None:
    """Restore the newest checkpoint in `folder` that reads whole; return it and the loop's
    state, or None when there is none. A checkpoint that fails is logged with why and the one
    before it is tried; nothing is changed until one has been read and checked in full."""
    for path in reversed(complete(folder)):
        if path in skip:
            continue
        err: CheckpointError | None = None
        try:
            read = _read(accelerator, path)
            for model, weights in zip(accelerator._models, read.models, strict=True):
                _check_keys(accelerator.unwrap_model(model), weights)
        except CheckpointError as e:
            err = e
        if not _agreed(accelerator, err is None):
            log.warning(
                "checkpoint %s not resumed from (%s): trying the one before",
                path,
                err or "another process could not read it",
            )
            continue
        _apply(accelerator, read, scheduler)
        return path, read.loop
    return None
