"""Writing outputs so that a failed stage never leaves one that looks complete."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; it replaces `final` only on success.

    A stage killed outright (SIGKILL, power loss) cannot remove its folder: the next run of the
    stage removes what such runs left (DVC runs one stage of a repository at a time)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        tmp.replace(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes.

    Manifests record one per image or clip: a stage that reads the files lists only the
    manifest as its DVC dependency (one file to check, not thousands), and any change to any
    file still changes the manifest.
    """
    return hashlib.sha256(path.read_bytes()).hexdigest()


def damaged_safetensors(folder: Path) -> list[Path]:
    """The .safetensors files of `folder` whose header safetensors cannot read."""
    from safetensors import safe_open

    bad = []
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="np"):
                pass
        except Exception:  # noqa: BLE001 - SafetensorError and whatever a bad header raises
            bad.append(path)
    return bad
