"""Which score encoder learns more in the same CPU time: ViT over whole-height patches, or the
convolutional encoder (conv blocks, then transformer layers), side by side on the same data.

    python -m benchmarks.score_encoders --root RUN [--minutes 12] [--encoders vit conv]
        [--parts 6] [--engravings lilypond verovio:Leland lilypond+scan]

RUN is a pipeline run whose data@score and tokenizer@score have run (under the paths of
--params, this checkout's params.yaml by default, which also gives every other setting).
Each encoder is trained by the real training engine (tasks.train.run, the run's params with
score_train.model.encoder set) for as many optimizer steps as `--minutes` of CPU time allow
at its own cost per step (CPU seconds of this process and its children, all threads, measured
first over a few steps with the same engine, threads and batch: a fair budget on a busy
machine too, where wall time is not); then read as
the pipeline reads it: the training stage's own held-out TERs (val, test, heldout: greedy
under its CTC head), and whole held-out pages per engraving (sonfolio.score.eval.page_eval,
as eval@score reads them, by the trained PyTorch model). Writes
benchmarks/results/score_encoders.json (the machine, its load, each encoder's steps, seconds
and figures) and prints a table. docs/training.md keeps the table of what was tried.
"""

from __future__ import annotations

import argparse
import logging
import math
import resource
import tempfile
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks import console
from sonfolio import cpu, tracks
from sonfolio.config.params import load_params
from sonfolio.io import read_jsonl, write_json

RESULTS = Path("benchmarks/results/score_encoders.json")
# each encoder's cost per step: two short runs, their CPU seconds' difference over their steps'
# difference (set-up and the held-out decoding after training cancel out)
PROBE_STEPS = (4, 14)


def cpu_seconds() -> float:
    """User and system CPU seconds of this process (all its threads) and its waited children."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def train(params: Any, root: Path, encoder: str, steps: int, out: Path) -> tuple[dict, float]:
    """The engine's own training of `encoder` for `steps` optimizer steps into `out`; its
    metrics and the CPU seconds it took."""
    from tasks.train import run

    model = params.score_train.model.model_copy(update={"encoder": encoder})
    cfg = params.score_train.model_copy(
        update={"model": model, "max_steps": steps, "eval_every": max(steps, 1),
                "checkpoint_every": max(steps, 1), "early_stopping_patience": 10**6}
    )  # fmt: skip
    training = tracks.face("score", "train").training(
        params.model_copy(update={"score_train": cfg})
    )
    own = params.paths.track("score")
    start = cpu_seconds()
    metrics = run(
        "score",
        training,
        params.engine_options(cfg.preset),
        root / own.data,
        root / own.tokenizer,
        out,
        out.parent / f"{out.name}_train.json",
        out.parent / "checkpoints",
        None,
    )
    return metrics, cpu_seconds() - start


def pages(params: Any, root: Path, folder: Path, args: argparse.Namespace, work: Path) -> dict:
    """Whole held-out pages read by the trained model, per engraving (as eval@score)."""
    from sonfolio import variants
    from sonfolio.score.common.lilypond import find_lilypond
    from sonfolio.score.eval.page_eval import evaluate_pages, heldout_parts

    rows = read_jsonl(root / params.paths.track("score").data / "manifest.jsonl")
    parts = heldout_parts(rows, "heldout", args.parts, params.score_eval.seed)
    variant = variants.load(folder, threads=args.threads, device="cpu")
    exe = find_lilypond(params.score_data.lilypond)
    return evaluate_pages(variant, parts, params.infer, exe, params.score_eval.pages.dpi, work,
                          tuple(args.engravings), params.score_data.scan)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="a run with data@score done")
    parser.add_argument(
        "--params", type=Path, default=Path("params.yaml"),
        help="the settings (this checkout's); --root's paths hold the data",
    )  # fmt: skip
    parser.add_argument(
        "--minutes", type=float, default=24.0, help="CPU minutes each (2 cores: ~12 wall)"
    )
    parser.add_argument("--encoders", nargs="+", default=["vit", "conv"])
    parser.add_argument("--parts", type=int, default=6, help="held-out parts read as pages")
    parser.add_argument("--engravings", nargs="+",
                        default=["lilypond", "verovio:Leland", "lilypond+scan"])  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params(args.params)
    load_before = cpu.load_average()
    result: dict[str, Any] = {"minutes": args.minutes, "encoders": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for encoder in args.encoders:
            short, long = (
                train(params, args.root, encoder, n, work / f"probe_{encoder}_{n}")[1]
                for n in PROBE_STEPS
            )
            step_s = (long - short) / (PROBE_STEPS[1] - PROBE_STEPS[0])  # CPU s a step
            steps = max(PROBE_STEPS[1], math.floor(args.minutes * 60 / step_s))
            metrics, seconds = train(params, args.root, encoder, steps, work / encoder)
            figures = pages(params, args.root, work / encoder, args, work / f"pages_{encoder}")
            result["encoders"][encoder] = {
                "steps": steps,
                "probe_cpu_s_per_step": round(step_s, 3),
                "train_cpu_s": round(seconds, 1),
                "parameters": metrics.get("parameters"),
                **{k: metrics.get(k) for k in ("test_ter", "heldout_ter")},
                "pages": {
                    name: {
                        k: f.get(k)
                        for k in ("pages", "note_error_rate", "note_error_rate_pitch", "valid_rate")
                    }
                    for name, f in figures.get("by_engraving", {}).items()
                },  # fmt: skip
            }
    result["conditions"] = {"root": str(args.root), **cpu.run_conditions(load_before)}
    write_json(args.out, result)
    table = Table(title=f"score encoders, {args.minutes:g} CPU minutes of training each")
    names = list(args.engravings)
    for col in ("encoder", "steps", "CPU s/step", "test TER", "held-out TER",
                *[f"pages {n}" for n in names]):  # fmt: skip
        table.add_column(col)
    for encoder, r in result["encoders"].items():
        table.add_row(
            encoder, str(r["steps"]), f"{r['probe_cpu_s_per_step']:.2f}", str(r["test_ter"]),
            str(r["heldout_ter"]),
            *[str(r["pages"].get(n, {}).get("note_error_rate")) for n in names],
        )  # fmt: skip
    console(120).print(table)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
