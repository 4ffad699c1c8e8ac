"""Stage score_data: real and synthetic music -> one cropped image per staff system + its text.

Run:    dvc repro score_data      (or: python -m tasks.score_data)
Reads:  params.yaml (score_data, paths); music21's corpus or the configured folders/archives.
Writes: ${paths.track("score").data}/images/<split>/NNNNNN.png, ${paths.track("score").data}/manifest.jsonl
        (image, text, piece, collection, split), ${paths.metrics}/score_data.json (stats).

A source file that cannot be parsed is skipped and counted by reason; past
`score_data.max_skip_fraction` of all pieces the stage fails and lists them. A system whose
render disagrees with its text (a failed bar check) is dropped and counted.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from sonfolio.config import ScoreData, load_params
from sonfolio.io import file_sha256, staged_dir, write_json, write_jsonl
from sonfolio.logs import setup_logging
from sonfolio.parallel import pool_map, worker_count
from sonfolio.score.canonical import symbols
from sonfolio.score.dataset import (
    SPLITS,
    Entry,
    Parsed,
    parse_unit,
    plan,
    render_jobs,
    render_settings,
    synthetic,
)
from sonfolio.score.lilypond import find_lilypond
from sonfolio.score.render import render_batch
from sonfolio.score.sources import list_units

log = logging.getLogger(__name__)


class TooManySkipped(RuntimeError):
    """More source files were unusable than score_data.max_skip_fraction allows."""


def check_skips(parsed: list[Parsed], max_fraction: float) -> Counter[str]:
    skipped = [p for p in parsed if p.skip_reason]
    if parsed and len(skipped) / len(parsed) > max_fraction:
        listing = "\n".join(f"  {p.unit.path} [{p.unit.piece}]: {p.skip_reason}" for p in skipped)
        raise TooManySkipped(
            f"{len(skipped)} of {len(parsed)} pieces could not be used "
            f"({len(skipped) / len(parsed):.1%} > score_data.max_skip_fraction = "
            f"{max_fraction}). Fix or remove these files, or raise the fraction:\n{listing}"
        )
    for p in skipped:
        log.warning("skipped %s: %s", p.unit.piece, p.skip_reason)
    return Counter(p.skip_reason for p in skipped if p.skip_reason)


def render_all(entries: list[Entry], cfg: ScoreData, lilypond: Path, out: Path) -> list[str | None]:
    workers = worker_count(cfg.workers)
    jobs = render_jobs(entries, cfg, out)
    # Interleaved batches (job i goes to batch i mod n): each batch gets the same mix of light
    # folk tunes and dense synthetic systems, so no worker is left with a slow tail; at least
    # four batches per worker, at most systems_per_process systems per LilyPond process.
    n = max(workers * 4, -(-len(jobs) // cfg.systems_per_process))
    batches = [jobs[i::n] for i in range(min(n, len(jobs)))]
    render = partial(render_batch, settings=render_settings(cfg, lilypond))
    outcomes = list(pool_map(render, batches, workers, "rendering systems"))
    # Undo the interleaving: outcome k of batch i belongs to job i + k * n.
    flat: list[str | None] = [None] * len(jobs)
    for i, batch in enumerate(outcomes):
        flat[i::n] = batch
    return flat


def summarize(entries: list[Entry], skipped: Counter[str], dropped: Counter[str]) -> dict[str, Any]:
    lengths = sorted(len(symbols(e.text)) for e in entries) or [0]
    return {
        "systems": {s: sum(e.split == s for e in entries) for s in SPLITS},
        "pieces": {s: len({e.piece for e in entries if e.split == s}) for s in SPLITS},
        "synthetic_systems": sum(e.collection == "synthetic" for e in entries),
        "symbols_per_system": {
            "min": lengths[0],
            "median": statistics.median(lengths),
            "p95": lengths[int(0.95 * (len(lengths) - 1))],
            "max": lengths[-1],
        },
        "skipped_pieces": dict(skipped),
        "dropped_systems": dict(dropped),
    }


def run(cfg: ScoreData, download_cache: Path, out: Path, metrics: Path) -> dict[str, Any]:
    """Build the dataset into `out` (replaced only on success) and write stats to `metrics`."""
    start = time.perf_counter()
    lilypond = find_lilypond(cfg.lilypond)  # fail before any parsing if it is missing
    units = [u for s in cfg.sources for u in list_units(s, download_cache, cfg.seed)]
    workers = worker_count(cfg.workers)
    log.info("%d pieces from %d source(s), %d worker(s)", len(units), len(cfg.sources), workers)
    parse = partial(parse_unit, bars_per_system=cfg.bars_per_system)
    parsed = list(pool_map(parse, units, workers, "parsing pieces"))
    skipped = check_skips(parsed, cfg.max_skip_fraction)
    dropped: Counter[str] = sum((p.dropped for p in parsed), Counter())
    systems = [(s, p.unit.collection) for p in parsed for s in p.systems]
    systems += synthetic(len(systems), cfg)
    with staged_dir(out) as tmp:
        entries = plan(systems, cfg)
        outcomes = render_all(entries, cfg, lilypond, tmp)
        dropped.update(r for r in outcomes if r is not None)
        kept = [e for e, r in zip(entries, outcomes, strict=True) if r is None]
        rows = [{**asdict(e), "sha256": file_sha256(tmp / e.image)} for e in kept]
        write_jsonl(tmp / "manifest.jsonl", rows)
    stats = summarize(kept, skipped, dropped)
    elapsed = time.perf_counter() - start
    stats.update(seconds=round(elapsed, 2), systems_per_s=round(len(kept) / elapsed, 2))
    write_json(metrics, stats)
    log.info("kept %d systems %s; dropped %s", len(kept), stats["systems"], dict(dropped))
    return stats


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.score_data, paths.download_cache, paths.track("score").data, paths.metrics / "score_data.json"
    )


if __name__ == "__main__":
    main()
