"""Benchmarks: each script writes JSON under benchmarks/results/ and prints a table."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from sonfolio import tracks
from tasks.data import run as run_data


def console(min_width: int = 120) -> Console:
    """A console at least `min_width` columns wide: rich falls back to 80 when the output is
    not a terminal (a log file, CI), which cuts the tables' columns."""
    return Console(width=max(Console().width, min_width))


def timed_data_run(cfg: Any, track: str, cache: Path | None = None) -> tuple[dict[str, Any], float]:
    """The data stage's own `run()` of `track` on `cfg` into a scratch folder: its stats, and
    the wall-clock seconds it took. `cache`: where archive sources are downloaded (None: a
    scratch folder, for a track whose sources need no download)."""
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        start = time.perf_counter()
        stats = run_data(
            cfg,
            tracks.face(track, "data"),
            cache or scratch / "downloads",
            scratch / "out",
            scratch / "stats.json",
        )
        return stats, time.perf_counter() - start


def publish(out: Path, result: dict[str, Any], table: Any) -> None:
    """Write a benchmark's JSON to `out`, print its table (`table(result)`) and where it went."""
    from sonfolio.io import write_json

    write_json(out, result)
    table(result)
    print(f"wrote {out}")
