"""Stage score_eval: every score model variant on the same systems: symbol and character error
rates, exact matches, errors by kind, compile rate, and side-by-side images.

Run:    dvc repro score_eval      (or: python -m tasks.score_eval)
Reads:  params.yaml (score_eval, score_data.lilypond, paths), ${paths.track("score").data}/ (manifest,
        images), ${paths.track("score").model}/ (the FP32 model: the reference) and every variant folder
        under ${paths.track("score").export}/ that exists (sonfolio.variants.discover)
Writes: ${paths.track("score").eval}/samples/<variant>/<split>/ (predictions.jsonl; worst_NN.png and
        random_NN.png: input, prediction render, truth render), ${paths.track("score").eval}/quality.csv
        (dvc plots), ${paths.metrics}/score_eval.json (per variant and split, with each
        variant's difference from the reference)

Definitions (symbols, error kinds, the strict compile rate): docs/evaluation.md.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from sonfolio import variants
from sonfolio.config import ScoreEval, load_params
from sonfolio.io import read_jsonl, staged_dir, write_json, write_jsonl
from sonfolio.logs import setup_logging
from sonfolio.score import compile_check, metrics
from sonfolio.score.batches import load_image, to_pixel_values
from sonfolio.score.lilypond import find_lilypond
from sonfolio.score.panels import side_by_side

log = logging.getLogger(__name__)

STAGE = "score_eval"
# Compared with the reference variant (the first: torch FP32); a positive ser delta is a loss.
DELTA_KEYS = ("ser", "cer", "exact_match", "compile_rate")


def decode(v: variants.Variant, rows: list[dict], data: Path, cfg: ScoreEval) -> list[str]:
    """Greedy predictions for `rows`, `cfg.batch_size` systems per generate call."""
    height, width = v.processor.size["height"], v.processor.size["width"]
    hyps: list[str] = []
    with Progress(transient=True) as bar:
        task = bar.add_task(f"{v.name}: decoding", total=len(rows))
        for start in range(0, len(rows), cfg.batch_size):
            chunk = rows[start : start + cfg.batch_size]
            # (B, 1, H, W) float, ink = 1: what the model was trained on (score.batches)
            pixels = to_pixel_values(
                np.stack([load_image(data / r["image"], height, width) for r in chunk])
            )
            hyps += v.generate(pixels, cfg.decode_max_tokens)
            bar.advance(task, len(chunk))
    return hyps


def choose_examples(
    scores: list[metrics.SystemScore], cfg: ScoreEval, split: str
) -> dict[int, str]:
    """Row index -> sample name: the worst systems by SER (ties: longest reference first),
    then a seeded random draw among the others."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i].ser, -scores[i].ref_symbols, i))
    picks = {i: f"worst_{k + 1:02d}" for k, i in enumerate(order[: cfg.worst_examples])}
    rest = [i for i in range(len(scores)) if i not in picks]
    drawn = random.Random(f"{cfg.seed}-{split}-random").sample(
        rest, min(cfg.random_examples, len(rest))
    )
    picks.update({i: f"random_{k + 1:02d}" for k, i in enumerate(sorted(drawn))})
    return picks


def compile_all(
    hyps: list[str], cfg: ScoreEval, exe: Path, keep: dict[int, Path], label: str
) -> list[compile_check.CompileResult]:
    """Compile results per prediction; each distinct text is compiled once."""
    unique = list(dict.fromkeys(hyps))
    where = {t: k for k, t in enumerate(unique)}
    keep_unique = {where[hyps[i]]: path for i, path in keep.items()}
    with Progress(transient=True) as bar:
        task = bar.add_task(f"{label}: compiling", total=len(unique))
        results = compile_check.compile_texts(
            unique,
            exe,
            batch_size=cfg.compile_batch,
            timeout_s=cfg.compile_timeout_s,
            resolution=cfg.render_dpi,
            keep=keep_unique,
            on_batch=lambda n: bar.advance(task, n),
        )
    # A text kept for several rows was copied once: every row's path points at that copy.
    for i in keep:
        keep[i] = keep_unique[where[hyps[i]]]
    return [results[where[h]] for h in hyps]


class TruthRenders:
    """Renders of reference texts, made once per row and shared by every variant."""

    def __init__(self, folder: Path, exe: Path, cfg: ScoreEval) -> None:
        self.folder, self.exe, self.cfg = folder, exe, cfg
        self.done: dict[tuple[str, int], Path | None] = {}

    def get(self, split: str, rows: list[dict], indices: list[int]) -> dict[int, Path | None]:
        todo = [i for i in indices if (split, i) not in self.done]
        keep = {k: self.folder / f"{split}-{i}.png" for k, i in enumerate(todo)}
        results = compile_check.compile_texts(
            [rows[i]["text"] for i in todo],
            self.exe,
            batch_size=self.cfg.compile_batch,
            timeout_s=self.cfg.compile_timeout_s,
            resolution=self.cfg.render_dpi,
            keep=keep,
        )
        for k, (i, r) in enumerate(zip(todo, results, strict=True)):
            self.done[(split, i)] = keep[k] if r.outcome == "compiled" else None
        return {i: self.done[(split, i)] for i in indices}


def evaluate_split(
    v: variants.Variant,
    split: str,
    rows: list[dict],
    data: Path,
    cfg: ScoreEval,
    exe: Path,
    work: Path,
    truths: TruthRenders,
    out: Path,
) -> dict[str, Any]:
    """Metrics of one variant on one split; writes its predictions and side-by-side images."""
    t0 = time.perf_counter()
    hyps = decode(v, rows, data, cfg)
    decode_s = time.perf_counter() - t0
    refs = [r["text"] for r in rows]
    quality, scores = metrics.summarize(refs, hyps)
    picks = choose_examples(scores, cfg, split)
    renders = {i: work / v.name / split / f"{i}.png" for i in picks}
    t1 = time.perf_counter()
    results = compile_all(hyps, cfg, exe, renders, f"{v.name} {split}")
    compile_s = time.perf_counter() - t1
    truth = truths.get(split, rows, sorted(picks))
    folder = out / v.name / split
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in picks.items():
        pred = renders[i] if results[i].outcome == "compiled" else None
        side_by_side(
            data / rows[i]["image"],
            pred,
            truth[i],
            (
                "input",
                f"prediction ({v.name}): SER = {scores[i].ser:.2f}, {_status(results[i])}",
                "truth",
            ),
            f"{results[i].outcome}: {results[i].reason}",
            folder / f"{name}.png",
        )
    write_jsonl(folder / "predictions.jsonl", _prediction_rows(rows, hyps, scores, results, picks))
    return {
        **quality,
        **compile_check.summarize(results),
        "decode_s": round(decode_s, 2),
        "systems_per_s": round(len(rows) / decode_s, 2),
        "compile_s": round(compile_s, 2),
    }


def _status(r: compile_check.CompileResult) -> str:
    if r.outcome != "compiled":
        return "does not compile"
    return "compiles, bar check failed" if r.bar_check else "compiles"


def _prediction_rows(rows, hyps, scores, results, picks) -> list[dict[str, Any]]:
    return [
        {
            "image": row["image"],
            "ref": row["text"],
            "hyp": hyp,
            "ser": round(s.ser, 4),
            "errors_by_kind": dict(s.kinds),
            "compile": r.outcome,
            "compile_reason": r.reason,
            "bar_check_warning": r.bar_check,
            "sample": picks.get(i),
        }
        for i, (row, hyp, s, r) in enumerate(zip(rows, hyps, scores, results, strict=True))
    ]


def _round(m: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()}


def run(
    cfg: ScoreEval,
    data: Path,
    variant_dirs: list[Path],
    out: Path,
    metrics_path: Path,
    lilypond: Path,
) -> dict[str, Any]:
    """Evaluate each variant folder (the first is the reference) on cfg.splits.

    Raises:
        VariantError: a variant folder cannot be loaded or is not a score model.
        ValueError: a split has no systems.
    """
    rows = read_jsonl(data / "manifest.jsonl")
    splits = {s: variants.eval_rows(rows, s, cfg.max_samples, cfg.seed) for s in cfg.splits}
    for split, chosen in splits.items():
        if not chosen:
            raise ValueError(
                f"{data}/manifest.jsonl has no {split!r} rows: check score_eval.splits"
            )
    start = time.perf_counter()
    with staged_dir(out / "samples") as tmp, tempfile.TemporaryDirectory() as work:
        truths = TruthRenders(Path(work) / "truth", lilypond, cfg)

        def one(v: variants.Variant, split: str, chosen: list[dict]) -> dict[str, Any]:
            m = evaluate_split(v, split, chosen, data, cfg, lilypond, Path(work), truths, tmp)
            log.info(
                "%s %s: SER %.3f, compile rate %.3f", v.name, split, m["ser"], m["compile_rate"]
            )
            return _round(m)

        per_variant = variants.evaluate_all(variant_dirs, "score", cfg.threads, splits, one)
    result = variants.quality_results(
        per_variant,
        variant_dirs[0].name,
        DELTA_KEYS,
        "clean_compile_rate",
        out / "quality.csv",
        start,
    )
    write_json(metrics_path, result)
    return result


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.score_eval,
        paths.track("score").data,
        variants.discover(paths.track("score").model, paths.track("score").export),
        paths.track("score").eval,
        paths.metrics / f"{STAGE}.json",
        find_lilypond(params.score_data.lilypond),
    )


if __name__ == "__main__":
    main()
