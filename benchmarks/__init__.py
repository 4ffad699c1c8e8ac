"""Benchmarks: each script writes JSON under benchmarks/results/ and prints a table."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from sonfolio import cpu, tracks
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


def override(
    params: dict[str, Any], overrides: dict[str, Any], sections: tuple[str, ...], who: str
) -> dict[str, Any]:
    """`params` (params.yaml as loaded) with `overrides` (dotted key -> value) set in place;
    only keys under `sections` that params.yaml already has (a typo would otherwise add a key
    the schema then refuses, or, worse, one it ignores). `who` names the benchmark in errors."""
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        if not parents or parents[0] not in sections:
            raise SystemExit(f"{who}: {dotted}: only {' and '.join(sections)} keys are tried")
        node = params
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            raise SystemExit(f"{who}: {dotted} is not a key of params.yaml")
        node[leaf] = value
    return params


def settings_parser(doc: str, settings: Iterable[str], out: Path) -> argparse.ArgumentParser:
    """The command line of a benchmark that runs a pipeline's stages once per named setting
    (--root, --only, --out), for its own arguments to be added."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="a pipeline run's folder")
    parser.add_argument("--only", nargs="*", choices=sorted(settings), help="these settings")
    parser.add_argument("--out", type=Path, default=out)
    return parser


def earlier_result(out: Path) -> dict[str, Any]:
    """What a settings benchmark wrote to `out` before (its settings kept, one rerun at a time
    replacing its own), or a fresh result."""
    result = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    result.setdefault("settings", {})
    return result


def stamp_conditions(result: dict[str, Any], name: str, load_before: list[float]) -> None:
    """What setting `name` ran on, in its own row (rows kept from earlier runs may have had
    another CPU) and at the top level (the last run's)."""
    conditions = cpu.run_conditions(load_before)
    result["settings"][name]["conditions"] = conditions
    result |= conditions


def run_stage(work: Path, task: str, track: str) -> None:
    """A pipeline stage's module (`tasks.train`) for `track`, in a fresh process in `work`
    (its params.yaml and outputs), with this checkout's code: what a settings benchmark
    measures is the stage itself."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-m", task, track], cwd=work, env=env, check=True)
