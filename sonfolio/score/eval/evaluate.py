"""The score track's side of the eval stage (tasks/eval.py): one variant's predictions on one
split scored (symbol and character error rates, exact matches, errors by kind, compile rate)
and shown (side-by-side images: input, prediction render, truth render).

Definitions (symbols, error kinds, the strict compile rate): docs/evaluation.md.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from rich.progress import Progress

from sonfolio.evaluation import Decoded
from sonfolio.intervals import grouped, rate_interval
from sonfolio.io import write_jsonl
from sonfolio.score.eval import compile_check, metrics
from sonfolio.score.eval.page_eval import system_note_rates
from sonfolio.score.eval.panels import side_by_side
from sonfolio.score.model.batches import load_image, to_pixel_values

if TYPE_CHECKING:
    from sonfolio.config.eval import ScoreEval


def inputs(variant: Any, rows: list[dict], data: Path) -> torch.Tensor:
    """(B, 1, H, W) float pixels of `rows`' images, ink = 1: what the model was trained on
    (sonfolio.score.model.batches), at the size of the variant's processor."""
    height, width = variant.processor.size["height"], variant.processor.size["width"]
    return to_pixel_values(np.stack([load_image(data / r["image"], height, width) for r in rows]))


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


Known = dict[tuple[str, str | None], compile_check.CompileResult]


def compile_all(
    hyps: list[str],
    cfg: ScoreEval,
    exe: Path,
    keep: dict[int, Path],
    label: str,
    times: list[str | None] | None = None,
    known: Known | None = None,
) -> list[compile_check.CompileResult]:
    """Compile results per prediction, each read in its row's time in force (`times`); each
    distinct (text, time) is compiled once, and not at all where `known` (results of earlier
    calls, updated here: variants mostly write the same texts) has it and no render is kept."""
    known = {} if known is None else known
    pairs = list(zip(hyps, times or [None] * len(hyps), strict=True))
    unique = list(dict.fromkeys(pairs))
    where = {t: k for k, t in enumerate(unique)}
    keep_unique = {where[pairs[i]]: path for i, path in keep.items()}
    todo = [k for k, pair in enumerate(unique) if pair not in known or k in keep_unique]
    with Progress(transient=True) as bar:
        task = bar.add_task(f"{label}: compiling", total=len(todo))
        fresh = compile_check.compile_texts(
            [unique[k][0] for k in todo],
            exe,
            batch_size=cfg.compile_batch,
            timeout_s=cfg.compile_timeout_s,
            resolution=cfg.render_dpi,
            keep={n: keep_unique[k] for n, k in enumerate(todo) if k in keep_unique},
            on_batch=lambda n: bar.advance(task, n),
            times=[unique[k][1] for k in todo],
        )
    known.update((unique[k], r) for k, r in zip(todo, fresh, strict=True))
    # A text kept for several rows was copied once: every row's path points at that copy.
    for i in keep:
        keep[i] = keep_unique[where[pairs[i]]]
    return [known[p] for p in pairs]


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
            times=[rows[i].get("time") for i in todo],
        )
        for k, (i, r) in enumerate(zip(todo, results, strict=True)):
            self.done[(split, i)] = keep[k] if r.outcome == "compiled" else None
        return {i: self.done[(split, i)] for i in indices}


class Scorer:
    """Scores every variant's predictions and writes their samples; the truth renders are made
    once per run (under `work`, a scratch folder) and shared by every variant."""

    def __init__(self, cfg: ScoreEval, data: Path, lilypond: Path, work: Path) -> None:
        self.cfg, self.data, self.exe, self.work = cfg, data, lilypond, work
        self.truths = TruthRenders(work / "truth", lilypond, cfg)
        self.compiled: Known = {}  # (text, time) -> result, across variants and splits

    def score(self, decoded: Decoded, folder: Path) -> dict[str, Any]:
        """Metrics of one variant's predictions on one split; writes predictions.jsonl and
        the side-by-side images (worst_NN.png, random_NN.png) into `folder`."""
        variant, split, rows, hyps = decoded.variant, decoded.split, decoded.rows, decoded.hyps
        refs = [r["text"] for r in rows]
        quality, scores = metrics.summarize(refs, hyps)
        picks = choose_examples(scores, self.cfg, split)
        renders = {i: self.work / variant / split / f"{i}.png" for i in picks}
        t0 = time.perf_counter()
        times = [r.get("time") for r in rows]  # the time in force before each system
        label = f"{variant} {split}"
        results = compile_all(hyps, self.cfg, self.exe, renders, label, times, self.compiled)
        compile_s = time.perf_counter() - t0
        truth = self.truths.get(split, rows, sorted(picks))
        folder.mkdir(parents=True, exist_ok=True)
        for i, name in picks.items():
            pred = renders[i] if results[i].outcome == "compiled" else None
            side_by_side(
                self.data / rows[i]["image"],
                pred,
                truth[i],
                (
                    "input",
                    f"prediction ({variant}): SER = {scores[i].ser:.2f}, {_status(results[i])}",
                    "truth",
                ),
                f"{results[i].outcome}: {results[i].reason}",
                folder / f"{name}.png",
            )
        write_jsonl(
            folder / "predictions.jsonl", _prediction_rows(rows, hyps, scores, results, picks)
        )
        notes = system_note_rates(refs, hyps)  # the measure whole pages are read with
        pieces = [r.get("piece") or r["image"] for r in rows]  # a piece's systems err together
        errors, symbols = grouped([s.errors for s in scores], [s.ref_symbols for s in scores],
                                  pieces)  # fmt: skip
        return {
            **quality,
            "ser_ci95": rate_interval(errors, symbols),
            "ser_ci95_over": f"{len(errors)} pieces",
            "note_error_rate": notes["note_error_rate"],
            "note_error_rate_pitch": notes["note_error_rate_pitch"],
            **compile_check.summarize(results),
            "decode_s": round(decoded.decode_s, 2),
            "systems_per_s": round(len(rows) / decoded.decode_s, 2),
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
