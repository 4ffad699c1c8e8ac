"""What decoding under the canonical grammar costs and gives: plain greedy against constrained
decoding (sonfolio.score.decode.grammar) of one trained score model, same rows, one run.

Run:    python -m benchmarks.constrained [--root RUN] [--model FOLDER] [--split test]
        [--max-samples 300] [--threads 2]
Reads:  RUN/params.yaml (paths), the score data stage's manifest and images, and the model:
        by default the exported `infer.variant` (int8_ptq) under paths.tracks.score.export
Writes: benchmarks/results/constrained.json and prints a table: per decoding, the share of
        systems that validate (canonical.validate with the row's time in force), SER (symbol
        error rate, sonfolio.score.eval.metrics) and TER (sonfolio.evaluation.token_error_rate),
        ms per system; for constrained, how often greedy already validated (returned as is),
        searched, cut back to a complete point, or left empty; and the CPU.

The times are wall-clock per batch of `--batch-size` systems divided by the batch, encoder
included, on the same warm model; greedy runs first on every batch, then constrained.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks import console, publish
from sonfolio import cpu
from sonfolio.config.sections import Sections, parse_sections, read_yaml
from sonfolio.evaluation import token_error_rate
from sonfolio.io import read_jsonl
from sonfolio.score.common import canonical, lexicon
from sonfolio.score.eval import metrics
from sonfolio.score.eval.evaluate import inputs
from sonfolio.variant_eval import eval_rows
from sonfolio.variants import load

RESULTS = Path("benchmarks/results/constrained.json")


def decode(variant: Any, rows: list[dict], data: Path, args: argparse.Namespace) -> dict:
    """Both decodings of `rows`, batch by batch: texts and seconds for each."""
    out: dict[str, Any] = {"greedy": ([], 0.0), "constrained": ([], 0.0)}
    variant.generate(inputs(variant, rows[:1], data), args.max_tokens)  # warm-up
    for start in range(0, len(rows), args.batch_size):
        chunk = rows[start : start + args.batch_size]
        x = inputs(variant, chunk, data)
        times = [r.get("time") for r in chunk]
        for name, constrained in (("greedy", False), ("constrained", True)):
            t0 = time.perf_counter()
            texts = variant.generate(x, args.max_tokens, times=times, constrained=constrained)
            texts_so_far, seconds = out[name]
            out[name] = (texts_so_far + texts, seconds + time.perf_counter() - t0)
    return out


def figures(rows: list[dict], texts: list[str], seconds: float) -> dict[str, Any]:
    refs = [r["text"] for r in rows]
    valid = [canonical.is_canonical(t, r.get("time")) for t, r in zip(texts, rows, strict=True)]
    quality, _ = metrics.summarize(refs, texts)
    return {
        "valid_rate": round(sum(valid) / len(rows), 4),
        "ser": round(quality["ser"], 4),
        "ter": round(token_error_rate(refs, texts), 4),
        "empty": sum(not t for t in texts),
        "ms_per_system": round(1000 * seconds / len(rows), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the pipeline run")
    parser.add_argument("--model", type=Path, help="default: the exported --variant")
    parser.add_argument("--variant", default="int8_ptq", help="as infer.variant in params.yaml")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-samples", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # the run's paths only: an older run's params.yaml may lack sections added since
    params_file = args.root / "params.yaml"
    paths = parse_sections(Sections, read_yaml(params_file), str(params_file)).paths.track("score")
    model = args.model or args.root / paths.export / args.variant
    data = args.root / paths.data
    manifest = data / "manifest.jsonl"
    if not (model / "config.json").is_file() or not manifest.is_file():
        sys.exit(
            f"benchmarks.constrained: needs a trained score model ({model}) and the score data "
            f"stage's manifest ({manifest}): run the pipeline first (dvc repro export@score), "
            "or pass --root / --model"
        )
    rows = eval_rows(read_jsonl(manifest), args.split, args.max_samples, args.seed)
    if not rows:
        sys.exit(f"benchmarks.constrained: {manifest} has no {args.split!r} rows")
    variant = load(model, threads=args.threads, device="cpu")
    load_before = cpu.load_average()
    decoded = decode(variant, rows, data, args)
    stats = Counter(variant.decode_stats)
    result = {name: figures(rows, texts, seconds) for name, (texts, seconds) in decoded.items()}
    n = len(rows)
    result["constrained"].update(
        {
            key: stats.get(key, 0)
            for key in ("greedy_valid", "searched", "repaired", "cut_back", "empty")
        }
    )
    result["greedy_already_valid_rate"] = result["greedy"]["valid_rate"]
    result["conditions"] = {
        "model": str(model),
        "decoded_by": "CTC head" if variant.config.to_dict().get("ctc_decoding") else "attention",
        "split": args.split,
        "rows": n,
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "threads": args.threads,
        **cpu.run_conditions(load_before),
        "format_version": lexicon.FORMAT_VERSION,
    }
    publish(args.out, result, print_table)


def print_table(result: dict[str, Any]) -> None:
    c = result["conditions"]
    table = Table(title=f"greedy vs constrained ({c['model']}, {c['rows']} {c['split']} rows)")
    for col in ("decoding", "valid", "SER", "TER", "empty", "ms / system"):
        table.add_column(col)
    for name in ("greedy", "constrained"):
        r = result[name]
        table.add_row(
            name, f"{r['valid_rate']:.3f}", f"{r['ser']:.4f}", f"{r['ter']:.4f}",
            str(r["empty"]), f"{r['ms_per_system']:.1f}",
        )  # fmt: skip
    console().print(table)
    k = result["constrained"]
    print(
        f"constrained: greedy already valid {k['greedy_valid']}, searched {k['searched']} "
        f"(the repaired greedy reading won {k['repaired']}), cut back {k['cut_back']}, "
        f"empty {k['empty']}; CPU: {c['cpu']['summary']}"
    )


if __name__ == "__main__":
    main()
