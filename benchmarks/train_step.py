"""Benchmark a training step of each track: where its time goes, and how fast it runs.

    python -m benchmarks.train_step [--steps 40] [--preset default]

Runs the real training engine on the real data (data/score, data/speech and their tokenizer
stages must have run) with the configured model and engine preset, for `--steps` optimizer
steps after 2 warm-up steps, and no evaluation or checkpoint inside the window. Reports the
step-time breakdown (data wait, forward, backward, optimizer, other: ms and % of step time),
samples/s and tokens/s, and the choices the engine made. Writes
benchmarks/results/train_step.json and prints a table.

Targets on a 2-core CPU: other <= 5 % and data wait <= 2 % of step time.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import torch
from rich.table import Table

from benchmarks import console
from sonfolio.config import Params, load_params
from sonfolio.io import write_json
from sonfolio.train.engine import RunPaths, train

RESULTS = Path("benchmarks/results/train_step.json")
TARGETS = {"other_pct": 5.0, "data_wait_pct": 2.0}  # at most, % of step time


def measure(track_name: str, params: Params, steps: int, preset: str) -> dict[str, Any]:
    if track_name == "score_train":
        from sonfolio.score.track import make_track

        cfg = params.score_train
        track = make_track(
            cfg,
            params.paths.score_data,
            params.paths.score_tokenizer,
            params.score_data.image_long_side,
        )[0]
    else:
        from sonfolio.speech.track import make_track

        cfg = params.speech_train
        track = make_track(cfg, params.paths.speech_data, params.paths.speech_tokenizer)[0]
    total = steps + 2  # the engine leaves the first 2 steps out of the breakdown
    loop = cfg.model_copy(
        update={
            "max_steps": total,
            "eval_every": 10**6,
            "checkpoint_every": 10**6,
            "log_every": total,  # one log line at the end: samples/s, tokens/s
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        paths = RunPaths(Path(tmp) / "ckpt", None, Path(tmp) / "micro_batch.json")
        paths.checkpoints.mkdir()
        metrics = train(track, loop, params.engine_options(preset), paths).metrics
    return {
        "step_time": metrics["step_time"],
        "data_wait_pct": metrics["step_time"]["data_wait_pct"],
        "other_pct": metrics["step_time"]["other_pct"],
        "samples_per_s": metrics["samples_per_s"],
        "tokens_per_s": metrics["tokens_per_s"],
        "micro_batch": metrics["micro_batch"],
        "grad_accumulation": metrics["grad_accumulation"],
        "precision": metrics["precision"],
        "choices": metrics["choices"],
        "steps_measured": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40, help="measured steps per track")
    parser.add_argument("--preset", default="default", help="a train_presets name")
    parser.add_argument("--tracks", nargs="+", default=["score_train", "speech_train"])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params()
    result: dict[str, Any] = {
        track: measure(track, params, args.steps, args.preset) for track in args.tracks
    }
    result["conditions"] = {
        "preset": args.preset,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
        "os_cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    result["targets_max_pct"] = TARGETS
    write_json(RESULTS, result)
    table = Table(title="train step breakdown (% of step time)")
    for col in (
        "track",
        "step ms",
        "data wait",
        "forward",
        "backward",
        "optimizer",
        "other",
        "samples/s",
    ):
        table.add_column(col)
    for track in args.tracks:
        t = result[track]["step_time"]
        table.add_row(
            track,
            f"{t['step_ms']:.0f}",
            *(
                f"{t[k + '_pct']:.1f}"
                for k in ("data_wait", "forward", "backward", "optimizer", "other")
            ),
            f"{result[track]['samples_per_s']:.1f}",
        )
    console().print(table)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
