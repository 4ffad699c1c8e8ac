"""How long a `dvc repro` takes when nothing changed: the cost of every rerun check.

    python -m benchmarks.dvc_noop [--runs 5]

Run it after a whole `dvc repro` (every stage up to date; the script refuses otherwise, since
a stage that runs would be timed instead). Times `dvc repro` end to end as a user types it
(a new process each time: import, reading dvc.yaml and params.yaml, hashing the deps,
comparing with dvc.lock), `--runs` times, and writes the median beside the machine's cores
to benchmarks/results/dvc_noop.json; prints a table. The target is 2 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.table import Table

from benchmarks import console
from sonfolio.io import write_json

RESULTS = Path("benchmarks/results/dvc_noop.json")
TARGET_S = 2.0


def dvc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], capture_output=True, text=True, check=False
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed no-op runs (median)")
    args = parser.parse_args()
    status = dvc("status", "--quiet")
    if status.returncode != 0:
        sys.exit(
            "some stage is not up to date (`dvc status` lists it): run `dvc repro` first, "
            "then time the no-op"
        )
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        run = dvc("repro")
        times.append(time.perf_counter() - start)
        if run.returncode != 0 or "Running stage" in run.stdout:
            sys.exit(f"`dvc repro` was not a no-op:\n{run.stdout}{run.stderr}")
    stages = dvc("stage", "list", "--name-only").stdout.split()
    result = {
        "runs_s": [round(t, 3) for t in times],
        "median_s": round(statistics.median(times), 3),
        "target_s": TARGET_S,
        "stages": len(stages),
        "cores": os.cpu_count(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
    }
    write_json(RESULTS, result)
    table = Table(title="no-op `dvc repro` (nothing changed)")
    for col in ("stages", "runs (s)", "median (s)", "target (s)", "cores"):
        table.add_column(col)
    table.add_row(
        str(result["stages"]),
        " ".join(f"{t:.2f}" for t in times),
        f"{result['median_s']:.2f}",
        f"{TARGET_S:.1f}",
        str(result["cores"]),
    )
    console(100).print(table)
    print(f"written: {RESULTS}")


if __name__ == "__main__":
    main()
