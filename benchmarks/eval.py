"""Benchmark evaluation throughput: compile checks per second (batched, as eval@score runs
them) and greedy decodes per second for each model variant present.

    python -m benchmarks.eval [--systems 200] [--samples 32] [--threads 2]

compile: the first --systems test systems' reference texts (canonical, so each reaches
LilyPond) through sonfolio.score.eval.compile_check.compile_texts with score_eval's batch size:
grammar check + LilyPond + one PNG each. The grammar check alone is timed too.
decode: each variant found by sonfolio.variants.discover (the FP32 model and every exported
folder) decodes the first --samples test samples (inputs made by the track's definition, as
the eval stage makes them) with its <track>_eval batch size and token limit, after one untimed
warm-up batch; the median of --repeats rounds. A model that does not stop early runs to the
limit: tokens per sample are reported beside the rate, so rates compare only at equal tokens.
Writes benchmarks/results/eval.json and prints a table; conditions (threads, load average
before and after, cores) are recorded, since the machine is shared.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import onnxruntime
import torch
from rich.table import Table

from benchmarks import console
from sonfolio import cpu, tracks, variants
from sonfolio.config.params import Params, load_params
from sonfolio.io import read_jsonl, write_json
from sonfolio.score.common.lilypond import find_lilypond
from sonfolio.score.eval.compile_check import check_grammar, compile_texts

RESULTS = Path("benchmarks/results/eval.json")


def test_rows(data: Path, n: int) -> list[dict]:
    return [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "test"][:n]


def compile_rate(params: Params, n: int) -> dict[str, Any]:
    cfg = params.score_eval
    texts = [r["text"] for r in test_rows(params.paths.track("score").data, n)]
    exe = find_lilypond(params.score_data.lilypond)
    t0 = time.perf_counter()
    for t in texts:
        check_grammar(t)
    grammar_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = compile_texts(
        texts,
        exe,
        batch_size=cfg.compile_batch,
        timeout_s=cfg.compile_timeout_s,
        resolution=cfg.render_dpi,
    )
    seconds = time.perf_counter() - t0
    return {
        "systems": len(texts),
        "batch_size": cfg.compile_batch,
        "compiled": sum(r.outcome == "compiled" for r in results),
        "seconds": round(seconds, 2),
        "checks_per_s": round(len(texts) / seconds, 1),
        "grammar_checks_per_s": round(len(texts) / grammar_s, 0),
    }


def decode_rate(folder: Path, params: Params, n: int, threads: int, repeats: int) -> dict[str, Any]:
    """Median over `repeats` timed rounds (the machine is shared: one round can be an outlier)."""
    v = variants.load(folder, threads=threads)
    cfg = params.section(v.track, "eval")
    data = params.paths.track(v.track).data
    # the inputs are made before the clock starts
    x = tracks.face(v.track, "eval").eval_inputs(v, test_rows(data, n), data)
    v.generate(x[: cfg.batch_size], cfg.decode_max_tokens)  # warm-up
    rounds: list[float] = []
    for _ in range(repeats):
        texts: list[str] = []
        t0 = time.perf_counter()
        for start in range(0, len(x), cfg.batch_size):
            texts += v.generate(x[start : start + cfg.batch_size], cfg.decode_max_tokens)
        rounds.append(time.perf_counter() - t0)
    seconds = statistics.median(rounds)
    tokens = sum(len(v.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return {
        "track": v.track,
        "kind": v.kind,
        "device": v.device,
        "samples": len(texts),
        "batch_size": cfg.batch_size,
        "max_new_tokens": cfg.decode_max_tokens,
        "tokens_per_sample": round(tokens / len(texts), 1),
        "seconds": round(seconds, 2),
        "rounds_s": [round(r, 2) for r in rounds],
        "decodes_per_s": round(len(texts) / seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--systems", type=int, default=200, help="systems compiled")
    parser.add_argument("--samples", type=int, default=32, help="test samples per variant")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads per runtime")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params()
    paths = params.paths
    load_before = cpu.load_average()
    compile_result = compile_rate(params, args.systems)
    decodes: dict[str, Any] = {}
    for track, where in paths.tracks.items():
        for folder in variants.discover(where.model, where.export):
            decodes[f"{track}/{folder.name}"] = decode_rate(
                folder, params, args.samples, args.threads, args.repeats
            )
    result = {
        "compile": compile_result,
        "decode": decodes,
        "conditions": {
            "threads": args.threads,
            "repeats": args.repeats,
            **cpu.run_conditions(load_before),  # int8 decode speed depends on VNNI / AMX
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "cuda": torch.cuda.is_available(),
        },
    }
    write_json(RESULTS, result)
    print_table(result)
    print(f"wrote {RESULTS}")


def print_table(result: dict[str, Any]) -> None:
    c = result["compile"]
    table = Table(title="evaluation throughput")
    for col in ("measure", "per second", "detail"):
        table.add_column(col)
    table.add_row(
        "compile checks (grammar + LilyPond + PNG)",
        f"{c['checks_per_s']:.1f}",
        f"{c['systems']} systems, batches of {c['batch_size']}, {c['compiled']} compiled",
    )
    table.add_row("grammar checks alone", f"{c['grammar_checks_per_s']:.0f}", "")
    for name, d in result["decode"].items():
        table.add_row(
            f"decodes: {name} ({d['kind']}, {d['device']})",
            f"{d['decodes_per_s']:.2f}",
            f"{d['samples']} samples, batch {d['batch_size']}, "
            f"{d['tokens_per_sample']} tokens/sample (limit {d['max_new_tokens']})",
        )
    cond = result["conditions"]
    table.caption = (
        f"threads {cond['threads']}, load average {cond['load_average_before'][0]} -> "
        f"{cond['load_average_after'][0]} on {cond['cpus']} cores; {cond['cpu']['summary']}"
    )
    console().print(table)


if __name__ == "__main__":
    main()
