"""Resumable checkpoints: weights (safetensors), optimizer, scheduler, loss scaler and every
process's RNG state, saved by Accelerate's `save_state`, plus the loop's own state as JSON.

Accelerate writes the files; what is added here is atomicity and where they live:
- each checkpoint is written to a hidden temporary folder and renamed into place, so a crash
  mid-write leaves no checkpoint that looks complete (a rename is atomic on one filesystem);
- checkpoints live under `<checkpoints>/<stage>/<fingerprint>/`, outside the stage's DVC outs
  (DVC deletes outs before it reruns a stage). The fingerprint hashes everything that decides
  the run (config, data, tokenizer), so a rerun after a crash resumes only a run that would
  have computed the same thing, and a changed param starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from accelerate import Accelerator

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"  # written last into the temporary folder
PREFIX = "step-"


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


def latest(folder: Path) -> Path | None:
    """The newest complete checkpoint in `folder`, or None."""
    done = sorted(p for p in folder.glob(f"{PREFIX}*") if (p / STATE_FILE).is_file())
    return done[-1] if done else None


def save(
    accelerator: Accelerator, folder: Path, step: int, state: dict[str, Any], keep: int
) -> Path:
    """Save a checkpoint atomically; keep the newest `keep`. Call on every process."""
    final = folder / f"{PREFIX}{step:08d}"
    tmp = folder / f".{final.name}.tmp"
    if accelerator.is_main_process and tmp.exists():
        shutil.rmtree(tmp)  # left by a crash during an earlier save
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp), safe_serialization=True)
    if accelerator.is_main_process:
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=1))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in sorted(folder.glob(f"{PREFIX}*"))[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def load(accelerator: Accelerator, path: Path) -> dict[str, Any]:
    """Restore model, optimizer, scheduler, scaler and RNG states; return the loop's state."""
    accelerator.load_state(str(path))
    return json.loads((path / STATE_FILE).read_text())
