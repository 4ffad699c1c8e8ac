"""Benchmark the score track's data stage (data@score): systems/s end to end, and a no-op
`dvc repro`.

    python -m benchmarks.score_data [--pieces 120]

systems_per_s: parse + convert + render + write of a fixed set of real pieces (plus the
configured synthetic share), with 1 and with 2 worker processes, from params.yaml's settings.
noop_repro_s: the median of three `dvc repro` runs of this repository when nothing changed
(the pipeline is brought up to date first, which may take a while the first time).
Writes benchmarks/results/score_data.json and prints a table.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.table import Table

from benchmarks import console, timed_data_run
from sonfolio import cpu
from sonfolio.config.data import ScoreData
from sonfolio.config.params import load_params
from sonfolio.io import write_json

RESULTS = Path("benchmarks/results/score_data.json")


def bench_cfg(cfg: ScoreData, pieces: int, workers: int) -> ScoreData:
    """The configured sources, scaled down to about `pieces` pieces in the same proportions."""
    total = sum(s.max_pieces or pieces for s in cfg.sources)
    sources = [
        s.model_copy(
            update={"max_pieces": max(1, round((s.max_pieces or pieces) * pieces / total))}
        )
        for s in cfg.sources
    ]
    return cfg.model_copy(update={"sources": sources, "workers": workers})


def systems_per_s(cfg: ScoreData, cache: Path, workers: int, pieces: int) -> dict[str, float]:
    stats, elapsed = timed_data_run(bench_cfg(cfg, pieces, workers), "score", cache)
    systems = sum(stats["systems"].values())
    return {
        "systems": systems,
        "seconds": round(elapsed, 2),
        "systems_per_s": round(systems / elapsed, 1),
    }


def noop_repro_s() -> float:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    dvc = [sys.executable, "-m", "dvc", "repro"]
    subprocess.run(dvc, check=True, env=env, capture_output=True)  # bring it up to date
    times = []
    for _ in range(3):
        start = time.perf_counter()
        out = subprocess.run(dvc, check=True, env=env, capture_output=True, text=True).stdout
        times.append(time.perf_counter() - start)
        if "Running stage" in out:
            raise RuntimeError(f"`dvc repro` was not a no-op:\n{out}")
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pieces", type=int, default=120, help="real pieces per measurement")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params()
    cfg, cache = params.score_data, params.paths.download_cache
    load_before = cpu.load_average()  # another busy process on 2 cores halves the result
    runs = {f"{w}_process": systems_per_s(cfg, cache, w, args.pieces) for w in (1, 2)}
    result = {
        "systems_per_s": {k: v["systems_per_s"] for k, v in runs.items()},
        "runs": runs,
        "noop_repro_s": noop_repro_s(),
        "conditions": {
            "pieces": args.pieces,
            **cpu.run_conditions(load_before),
            "resolution_dpi": cfg.resolution_dpi,
            "python": platform.python_version(),
            "image_long_side": cfg.image_long_side,
            "augment": cfg.augment.enabled,
            "synthetic_fraction": cfg.synthetic_fraction,
        },
        "targets": {"systems_per_s": 60, "noop_repro_s": 2.0},
    }
    write_json(RESULTS, result)
    table = Table(title="score_data benchmark")
    for col in ("measure", "value", "target"):
        table.add_column(col)
    for k, v in result["systems_per_s"].items():
        table.add_row(f"systems/s, {k.replace('_', ' ')}", f"{v:.1f}", ">= 60")
    table.add_row("no-op dvc repro, s", f"{result['noop_repro_s']:.2f}", "<= 2")
    console().print(table)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
