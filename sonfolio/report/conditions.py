"""The conditions section: when, from which commit and on which machines the numbers were made."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sonfolio.report.items import Section, Table
from sonfolio.report.sources import Sources, read_json, stage_name


def git_commit(root: Path) -> str:
    """HEAD, marked when the working tree differs from it; 'unknown' outside a git checkout."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    try:
        head = git("rev-parse", "HEAD")
    except FileNotFoundError:
        return "unknown (git is not installed)"
    if head.returncode:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def _isa_row(name: str, isa: dict[str, Any] | None) -> list[str]:
    """The CPU's instruction sets, beside the int8 figures measured on it."""
    if not isa:
        return [name, "not recorded"]
    sat = isa.get("int8_saturates")
    note = {True: "8-bit int8 weights would saturate here", False: "no int8 saturation"}
    return [name, f"{isa['summary']} ({note.get(sat, 'saturation unknown')})"]


def conditions_section(src: Sources) -> Section:
    rows = [
        ["report made (UTC)", datetime.now(UTC).strftime("%Y-%m-%d %H:%M")],
        ["git commit", git_commit(src.root)],
        ["machine", f"{platform.node()}: {platform.platform()}, {os.cpu_count()} CPU cores"],
        ["python", platform.python_version()],
    ]
    for track in src.tracks:
        train = read_json(src.metrics_of(track, "train")) or {}
        if "choices" in train:
            rows.append([f"{track}_train device", train["choices"].get("device", "—")])
        bench = read_json(src.metrics_of(track, "bench")) or {}
        c = bench.get("conditions")
        if c:
            versions = ", ".join(f"{k} {v}" for k, v in c.get("versions", {}).items())
            rows.append(
                [
                    f"{stage_name(track, 'bench')} machine",
                    f"{c.get('machine')}, {c.get('cpu_count')} cores, load average before "
                    f"{c.get('load_average_before')}; {versions}",
                ]
            )
            rows.append(_isa_row(f"{stage_name(track, 'bench')} CPU (int8 / int4)", c.get("cpu")))
        evaluation = read_json(src.metrics_of(track, "eval")) or {}
        if evaluation.get("cpu"):
            rows.append(_isa_row(f"{track}_eval CPU (int8 / int4)", evaluation["cpu"]))
    return Section(
        "Conditions", [Table("What these numbers depend on", ["condition", "value"], rows)]
    )
