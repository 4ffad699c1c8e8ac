"""Where the report reads and how an absent input shows (what it asks a track: its report
face, sonfolio.faces.ReportFace)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sonfolio.report.items import Missing


@dataclass(frozen=True)
class Sources:
    """Where the report reads from; `root` resolves the relative paths written in metrics."""

    metrics: Path
    live: Path
    evals: dict[str, Path]  # track -> its eval folder (samples/, quality.csv)
    root: Path

    @property
    def tracks(self) -> list[str]:
        """The tracks the page shows, in this order: those with an eval folder."""
        return list(self.evals)

    def metrics_of(self, track: str, step: str) -> Path:
        """The metrics `<step>@<track>` writes: metrics/<track>_<step>.json."""
        return self.metrics / f"{track}_{step}.json"


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON at `path`, or None when the stage that writes it has not run."""
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def stage_name(track: str, step: str) -> str:
    """The dvc.yaml stage that runs `step` for `track` (every step is one stage run for each
    track: `train@score`): what `dvc repro` takes."""
    return f"{step}@{track}"


def missing(path: Path, track: str, step: str) -> Missing:
    """`path`, which `<step>@<track>` writes, is not there: the command that makes it."""
    stage = stage_name(track, step)
    return Missing(f"{path.as_posix()} (stage {stage})", f"dvc repro {stage}")
