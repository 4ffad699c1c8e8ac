"""Benchmark a training step of each track: where its time goes, and how fast it runs.

    python -m benchmarks.train_step [--steps 40] [--preset default]
    python -m benchmarks.train_step --compare [--steps 40]

Runs the real training engine on the real data (data/score, data/speech and their tokenizer
stages must have run) with the configured model and engine preset, for `--steps` optimizer
steps after 2 warm-up steps, and no evaluation or checkpoint inside the window. Reports the
step-time breakdown (data wait, forward, backward, optimizer, other: ms and % of step time),
samples/s and tokens/s, and the choices the engine made. Writes
benchmarks/results/train_step.json and prints a table.

Targets on a 2-core CPU: other <= 5 % and data wait <= 2 % of step time.

`--compare` measures the engine's speed options side by side instead, each laid over the
preset: fp32 against bf16, torch.compile on against off, the automatic micro-batch against the
whole batch. It reports step time, samples/s and the ratio to the preset, the micro-batch each
ran, and on a GPU MFU, utilisation and peak memory. Writes benchmarks/results/train_compare.json.
On the CPU it runs too (bf16 there is autocast, compile is inductor's C++ backend), so the
comparison is exercised without a GPU; its numbers matter on a GPU.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import platform
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from rich.table import Table

from benchmarks import console
from sonfolio import cpu, tracks
from sonfolio.config.params import Params, load_params
from sonfolio.config.train import EngineOptions
from sonfolio.io import write_json
from sonfolio.train.engine import train
from sonfolio.train.run import RunPaths

RESULTS = Path("benchmarks/results/train_step.json")
COMPARED = Path("benchmarks/results/train_compare.json")
TARGETS = {"other_pct": 5.0, "data_wait_pct": 2.0}  # at most, % of step time
# --compare: engine keys laid over the preset's, each against the preset itself
VARIANTS: dict[str, dict[str, Any]] = {
    "fp32": {"precision": "fp32"},
    "bf16": {"precision": "bf16"},
    "compile": {"compile": True},
    "auto-batch": {"micro_batch": "auto"},
}


def measure(track_name: str, params: Params, steps: int, opts: EngineOptions) -> dict[str, Any]:
    """`steps` timed steps of one track (`track_name`: its training stage, score_train)."""
    track = track_name.removesuffix("_train")
    training = tracks.face(track, "train").training(params)
    own = params.paths.track(track)
    setup = training.setup(own.data, own.tokenizer)
    total = steps + 2  # the engine leaves the first 2 steps out of the breakdown
    loop = training.cfg.model_copy(
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
        metrics = train(setup.track, loop, opts, paths).metrics
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
        "mfu_pct": metrics.get("mfu_pct"),
        **{k: v for k, v in metrics.items() if k.startswith("gpu_")},
        "steps_measured": steps,
    }


def conditions(preset: str) -> dict[str, Any]:
    return {
        "preset": preset,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
        **cpu.run_conditions(cpu.load_average()),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def compare(params: Params, tracks: list[str], steps: int, preset: str) -> None:
    """Each speed option against the preset, per track: --compare."""
    base = params.engine_options(preset)
    result: dict[str, Any] = {}
    for track in tracks:
        runs = {preset: isolated(track, params, steps, base)}
        for name, keys in VARIANTS.items():
            opts = base.model_copy(update=keys)
            # skipped where the preset sets these keys already (preset compile: compile on).
            # On a CPU, fp32 is measured although auto resolves to it: the pair shows the noise
            if opts != base:
                runs[name] = isolated(track, params, steps, opts)
        ref = runs[preset]["step_time"]["step_ms"]
        for run in runs.values():
            run["speedup_vs_preset"] = round(ref / run["step_time"]["step_ms"], 3)
        result[track] = runs
    result["conditions"] = conditions(preset)
    result["variants"] = VARIANTS
    write_json(COMPARED, result)
    table = Table(
        title=f"engine options against preset {preset!r} ({result['conditions']['device']})"
    )
    for col in (
        "track",
        "options",
        "precision",
        "compile",
        "micro-batch",
        "step ms",
        "samples/s",
        "speed-up",
        "MFU %",
        "GPU util %",
        "GPU peak GiB",
    ):
        table.add_column(col)
    for track in tracks:
        for name, run in result[track].items():
            table.add_row(
                track.removesuffix("_train"),
                name,
                run["precision"],
                run["choices"]["compile"].split(" ")[0],
                f"{run['micro_batch']} x {run['grad_accumulation']}",
                f"{run['step_time']['step_ms']:.0f}",
                f"{run['samples_per_s']:.1f}",
                f"{run['speedup_vs_preset']:.2f}x",
                _cell(run.get("mfu_pct")),
                _cell(run.get("gpu_util_pct")),
                _cell(run.get("gpu_mem_peak_gib")),
            )
    console(140).print(table)
    print(f"wrote {COMPARED}")


def isolated(track: str, params: Params, steps: int, opts: EngineOptions) -> dict[str, Any]:
    """`measure` in a fresh process: Accelerate's state is one per process (its precision
    cannot change), and neither torch.compile's caches nor the GPU's memory peak nor its warm
    allocator should carry from one measurement to the next."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        return pool.submit(measure, track, params, steps, opts).result()


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40, help="measured steps per track")
    parser.add_argument("--preset", default="default", help="a train_presets name")
    parser.add_argument("--tracks", nargs="+", default=["score_train", "speech_train"])
    parser.add_argument(
        "--compare", action="store_true", help="fp32/bf16, compile, auto batch against the preset"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params()
    if args.compare:
        compare(params, args.tracks, args.steps, args.preset)
        return
    opts = params.engine_options(args.preset)
    result: dict[str, Any] = {
        track: measure(track, params, args.steps, opts) for track in args.tracks
    }
    result["conditions"] = conditions(args.preset)
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
