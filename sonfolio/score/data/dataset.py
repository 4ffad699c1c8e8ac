"""Build the score dataset: pieces -> canonical systems -> splits -> rendered images.

Parsing and rendering run in a pool of processes (music21 and LilyPond are single-threaded).
Splits are by piece, so no piece has systems in two splits, plus a held-out split made of whole
collections to measure generalisation to music the model never saw the like of. A share of
the pieces (score_data.pages) is also engraved whole as pages and cut into lines as `read
--page` cuts (sonfolio.score.data.page_data): real line breaking, bar numbers, titles.

A source file that cannot be parsed is skipped and counted by reason; past
`score_data.max_skip_fraction` of all pieces the build fails and lists them. A system whose
render disagrees with its text (a failed bar check) is dropped and counted. A piece still
parsing after `score_data.limits.parse_timeout_s` has its worker killed and is skipped
("timeout"), as is one that needs more than `parse_memory_mb` ("too_large") or whose worker
died ("worker_died"); a file over its format's size cap (`max_file_mb`, `max_kern_mb`,
`max_abc_mb`) is skipped unread ("too_large"). A split the settings ask for that comes out
empty fails the build, saying what to change, instead of failing training later.
"""

from __future__ import annotations

import hashlib
import logging
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio.parallel import OUT_OF_MEMORY, pool_map, worker_count
from sonfolio.score.common.canonical import System
from sonfolio.score.common.lexicon import symbols
from sonfolio.score.common.lilypond import Setting, find_lilypond
from sonfolio.score.data.convert import systems_from_score
from sonfolio.score.data.page_data import PageJob, PageResult, chosen, layout_for, page_systems
from sonfolio.score.data.parse import SourceError, abc_tune_score, abc_tunes, pieces_from_file
from sonfolio.score.data.render import RenderJob, RenderSettings, render_batch
from sonfolio.score.data.rhythms import with_cut_time, with_dotted, with_triplets
from sonfolio.score.data.sources import Unit, display_name, list_units
from sonfolio.score.data.synth import synth_systems

if TYPE_CHECKING:
    from sonfolio.config.data import ScoreData, ScoreEngravers, ScoreLimits, ScoreSplit

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test", "heldout")
WHOLE_PART = 100_000  # bars per system: the converter gives each part as one text


class TooManySkipped(RuntimeError):
    """More source files were unusable than score_data.max_skip_fraction allows."""


class EmptySplit(RuntimeError):
    """A split the settings ask for has no system; the message says what to change."""


@dataclass
class Parsed:
    """What one unit gave: its systems, or why it was skipped."""

    unit: Unit
    systems: list[System] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    skip_reason: str | None = None
    # whole parts to engrave as pages too (score_data.pages): (part's system, the piece's title)
    wholes: list[tuple[System, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Entry:
    """One row of the manifest."""

    image: str  # relative to the dataset folder
    text: str
    piece: str
    collection: str
    split: str
    time: str | None = None  # the time in force when the header prints none (System.time)
    bar: int = 1  # the number of the system's first bar, printed above it unless it is 1
    layout: str = "system"  # "system": engraved alone; "page": a line cut from a page
    engraver: str = "lilypond"  # or "verovio:<font>" (score_data.engravers)


def parse_unit(
    unit: Unit,
    bars_per_system: int,
    limits: ScoreLimits | None = None,
    pages_fraction: float = 0.0,
    seed: int = 0,
) -> Parsed:
    """Parse one piece and cut it into canonical systems; never raises for a bad file. A piece
    drawn for pages (`pages_fraction`) also gives each part as one text (`Parsed.wholes`)."""
    try:
        if unit.tune is None:
            scores = pieces_from_file(unit.path, limits=limits)
        else:
            _, block = abc_tunes(unit.path.read_text(encoding="utf-8", errors="replace"))[unit.tune]
            scores = [("", abc_tune_score(unit.piece, block))]
    except SourceError as err:  # counted by reason and capped by the stage
        log.debug("cannot use %s: %s", unit.piece, err)
        return Parsed(unit, skip_reason=err.reason)
    parsed = Parsed(unit)
    for suffix, score in scores:
        piece = f"{unit.piece}#{suffix}" if suffix else unit.piece
        systems, dropped = systems_from_score(score, piece, bars_per_system)
        parsed.systems.extend(systems)
        parsed.dropped.update(dropped)
        if pages_fraction and chosen(piece, pages_fraction, seed):
            # a part converts whole or not at all (one bad measure drops the whole system)
            wholes, _ = systems_from_score(score, piece, WHOLE_PART)
            title = (score.metadata.title if score.metadata else None) or ""
            parsed.wholes += [(w, title) for w in wholes]
    if not parsed.systems and not parsed.dropped:
        parsed.skip_reason = "empty"
    return parsed


def lost_unit(unit: Unit, reason: str, limits: ScoreLimits) -> Parsed:
    """What a unit gives when its worker was killed for time, ran out of its memory or died:
    skipped, counted ("timeout", "too_large", "worker_died")."""
    if reason == "timeout":
        log.warning(
            "skipping %s: still parsing after %g s (score_data.limits.parse_timeout_s: raise it "
            "in params.yaml to wait longer); its worker was killed",
            unit.piece,
            limits.parse_timeout_s,
        )
    elif reason == OUT_OF_MEMORY:
        log.warning(
            "skipping %s (too_large): parsing it needed more than %g MB "
            "(score_data.limits.parse_memory_mb: raise it in params.yaml, with memory for "
            "one such parse per worker)",
            unit.piece,
            limits.parse_memory_mb,
        )
        reason = "too_large"
    else:
        log.warning(
            "skipping %s: its worker died while parsing it (a crash, or killed by the system "
            "for memory)",
            unit.piece,
        )
    return Parsed(unit, skip_reason=reason)


def parse_units(units: Sequence[Unit], cfg: ScoreData) -> list[Parsed]:
    """Parse every unit in a pool, each within score_data.limits.parse_timeout_s and
    parse_memory_mb; a unit whose worker was killed, ran out of that memory or died comes back
    skipped with the reason."""
    parse = partial(
        parse_unit,
        bars_per_system=cfg.bars_per_system,
        limits=cfg.limits,
        pages_fraction=cfg.pages.fraction,
        seed=cfg.seed,
    )
    lost = partial(lost_unit, limits=cfg.limits)
    workers = worker_count(cfg.workers)
    results = pool_map(
        parse, units, workers, "parsing pieces", time_limit_s=cfg.limits.parse_timeout_s,
        memory_limit_mb=cfg.limits.parse_memory_mb, lost=lost,
    )  # fmt: skip
    return list(results)


def split_of(piece: str, collection: str, cfg: ScoreSplit) -> str:
    """Deterministic split by piece: a hash of the piece id, never the system."""
    if collection in cfg.heldout_collections:
        return "heldout"
    digest = hashlib.sha256(f"{cfg.seed}/{piece}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < cfg.test:
        return "test"
    return "val" if u < cfg.test + cfg.val else "train"


def augment_seed(seed: int, image: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{image}".encode()).digest()[:4], "big")


def engraver_of(piece: str, cfg: ScoreEngravers, seed: int) -> str:
    """Who engraves a piece's systems: LilyPond for a `cfg.lilypond` share of the pieces,
    else Verovio in a font drawn from `cfg.verovio_fonts` (both seeded by the piece)."""
    digest = hashlib.sha256(f"{seed}/engraver/{piece}".encode()).digest()
    if int.from_bytes(digest[:8], "big") / 2**64 < cfg.lilypond or not cfg.verovio_fonts:
        return "lilypond"
    return (
        f"verovio:{cfg.verovio_fonts[int.from_bytes(digest[8:12], 'big') % len(cfg.verovio_fonts)]}"
    )


def plan(
    systems: list[tuple[System, str]], cfg: ScoreData, made: Counter[str] | None = None
) -> list[Entry]:
    """Assign splits and image paths; stable order so ids never depend on worker timing. A
    `score_data.triplets` share of the train systems of real music get eighth triplets, and a
    `score_data.dotted` share dotted pairs, and a `score_data.cut_time` share of those printing
    4/4 print 2/2 (sonfolio.score.data.rhythms; each drawn apart, seeded by image), counted in
    `made["triplet_systems"]`, `made["dotted_systems"]` and `made["cut_time_systems"]`."""
    entries: list[Entry] = []
    counters: Counter[str] = Counter()
    made = Counter() if made is None else made
    for system, collection in sorted(systems, key=lambda sc: (sc[0].piece, sc[0].index)):
        split = split_of(system.piece, collection, cfg.split)
        image = f"images/{split}/{counters[split]:06d}.png"
        counters[split] += 1
        engraver = engraver_of(system.piece, cfg.engravers, cfg.seed)
        text = system.text
        if split == "train" and collection != "synthetic":
            for name, share, rewrite, count in (
                ("triplets", cfg.triplets, with_triplets, "triplet_systems"),
                ("dotted", cfg.dotted, with_dotted, "dotted_systems"),
                ("cut_time", cfg.cut_time, with_cut_time, "cut_time_systems"),
            ):
                rng = random.Random(augment_seed(cfg.seed, f"{name}/{image}"))
                if share > 0 and rng.random() < share and (got := rewrite(text, system.time, rng)):
                    text = got
                    made[count] += 1
        entries.append(
            Entry(image, text, system.piece, collection, split, system.time, system.bar,
                  engraver=engraver)
        )  # fmt: skip
    return entries


def render_jobs(entries: Sequence[Entry], cfg: ScoreData, out: Path) -> list[RenderJob]:
    return [
        RenderJob(
            e.text,
            out / e.image,
            augment_seed(cfg.seed, e.image) if e.split == "train" else None,
            Setting(e.time, e.bar),
            e.engraver,
        )
        for e in entries
    ]


def synthetic(n_real: int, cfg: ScoreData) -> list[tuple[System, str]]:
    f = cfg.synthetic_fraction
    n = round(n_real * f / (1.0 - f)) if f > 0 else 0
    return [(s, "synthetic") for s in synth_systems(n, cfg.seed, cfg.bars_per_system)]


def render_settings(cfg: ScoreData, lilypond: Path) -> RenderSettings:
    return RenderSettings(lilypond, cfg.resolution_dpi, cfg.image_long_side, cfg.augment, cfg.scan)


def check_skips(parsed: list[Parsed], max_fraction: float) -> Counter[str]:
    """Count the skipped pieces by reason; fail, listing them, past `max_fraction` of all.

    Raises:
        TooManySkipped: naming the key to raise and every skipped file.
    """
    skipped = [p for p in parsed if p.skip_reason]
    if parsed and len(skipped) / len(parsed) > max_fraction:
        listing = "\n".join(
            f"  {display_name(p.unit.path)} [{p.unit.piece}]: {p.skip_reason}" for p in skipped
        )
        raise TooManySkipped(
            f"{len(skipped)} of {len(parsed)} pieces could not be used "
            f"({len(skipped) / len(parsed):.1%} > score_data.max_skip_fraction = "
            f"{max_fraction}). Fix or remove these files, or raise the fraction:\n{listing}"
        )
    for p in skipped:
        log.warning("skipped %s: %s", p.unit.piece, p.skip_reason)
    return Counter(p.skip_reason for p in skipped if p.skip_reason)


def check_splits(entries: Sequence[Entry], cfg: ScoreData, when: str) -> None:
    """Fail when a split is empty that training needs (train, val) or the settings ask for
    (test with a share above 0, heldout with collections named): training would die on it
    later, or the evaluation would silently have nothing to score.

    Raises:
        EmptySplit: naming the split, how many pieces there were, and the key to change.
    """
    fixes = {
        "train": "add pieces, or lower score_data.split.val and score_data.split.test",
        "val": (
            f"add pieces, or raise score_data.split.val (now {cfg.split.val:g}): training "
            "needs val systems"
        ),
    }
    if cfg.split.test > 0:
        fixes["test"] = "add pieces or set score_data.split.test to 0"
    if cfg.split.heldout_collections:
        fixes["heldout"] = (
            f"add pieces to {cfg.split.heldout_collections} or set "
            "score_data.split.heldout_collections to []"
        )
    pieces = len({e.piece for e in entries if e.collection != "synthetic"})
    for split, fix in fixes.items():
        if not any(e.split == split for e in entries):
            raise EmptySplit(
                f"{pieces} piece(s) give 0 {split} systems {when}: {fix} in params.yaml (splits "
                "are drawn by piece, so a small corpus can leave one empty)"
            )


def render_all(entries: list[Entry], cfg: ScoreData, lilypond: Path, out: Path) -> list[str | None]:
    """Render every entry's image under `out`; per entry, None or why it was dropped."""
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


def page_jobs(parsed: list[Parsed], cfg: ScoreData, out: Path) -> list[tuple[PageJob, str, str]]:
    """(job, collection, split) for every whole part drawn for pages, in a stable order."""
    jobs = []
    for p in parsed:
        for whole, title in p.wholes:
            split = split_of(whole.piece, p.unit.collection, cfg.split)
            # names from a hash: piece ids hold any character a user's file name holds
            stem = hashlib.sha256(f"{whole.piece}/{whole.index}".encode()).hexdigest()[:16]
            layout = layout_for(whole.piece, cfg.pages, cfg.seed, title)
            engraver = engraver_of(whole.piece, cfg.engravers, cfg.seed)
            job = PageJob(whole.piece, whole.text, layout, out / "images" / split / "pages", stem,
                          augment=split == "train", engraver=engraver)  # fmt: skip
            jobs.append((job, p.unit.collection, split))
    return sorted(jobs, key=lambda j: (j[0].piece, j[0].stem))


def lost_page(job: PageJob, reason: str) -> PageResult:
    log.warning(
        "%s: engraving its pages ran out of time or its worker died (%s)", job.piece, reason
    )
    return PageResult(dropped=Counter({f"page_{reason}": 1}))


def page_entries(
    parsed: list[Parsed], cfg: ScoreData, lilypond: Path, out: Path
) -> tuple[list[Entry], Counter[str]]:
    """Engrave the drawn parts as pages and cut them: one entry per proven line."""
    jobs = page_jobs(parsed, cfg, out)
    if not jobs:
        return [], Counter()
    engrave = partial(
        page_systems,
        cfg=cfg.pages,
        exe=lilypond,
        render=render_settings(cfg, lilypond),
        seed=cfg.seed,
    )
    limit = 2 * cfg.pages.timeout_s + 60  # two engravings, then the cut
    results = pool_map(
        engrave, [j for j, _, _ in jobs], worker_count(cfg.workers), "engraving pages",
        time_limit_s=limit, lost=lost_page,
    )  # fmt: skip
    entries: list[Entry] = []
    dropped: Counter[str] = Counter()
    for (job, collection, split), result in zip(jobs, results, strict=True):
        dropped.update(result.dropped)
        for image, line in zip(result.images, result.lines, strict=True):
            rel = image.relative_to(out).as_posix()
            entries.append(
                Entry(
                    rel,
                    line.text,
                    job.piece,
                    collection,
                    split,
                    line.time,
                    line.bar,
                    "page",
                    job.engraver,
                )  # fmt: skip
            )
    log.info("%d page lines from %d parts; dropped %s", len(entries), len(jobs), dict(dropped))
    return entries, dropped


def summarize(entries: list[Entry], skipped: Counter[str], dropped: Counter[str]) -> dict[str, Any]:
    lengths = sorted(len(symbols(e.text)) for e in entries) or [0]
    return {
        "systems": {s: sum(e.split == s for e in entries) for s in SPLITS},
        "pieces": {s: len({e.piece for e in entries if e.split == s}) for s in SPLITS},
        "synthetic_systems": sum(e.collection == "synthetic" for e in entries),
        "page_lines": {
            s: sum(e.split == s and e.layout == "page" for e in entries) for s in SPLITS
        },
        "symbols_per_system": {
            "min": lengths[0],
            "median": statistics.median(lengths),
            "p95": lengths[int(0.95 * (len(lengths) - 1))],
            "max": lengths[-1],
        },
        "skipped_pieces": dict(skipped),
        "dropped_systems": dict(dropped),
    }


def build(
    cfg: ScoreData, download_cache: Path, out: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Render the dataset's images into `out`; its manifest rows (image, text, piece,
    collection, split, time, bar, layout) and its stats. Systems engraved alone come first,
    then the lines cut from pages (score_data.pages).

    Raises:
        LilyPondNotFound: before any parsing. SourceConfigError: a source cannot be read.
        TooManySkipped: more pieces than score_data.max_skip_fraction could not be parsed.
        EmptySplit: a split the settings ask for has no system.
    """
    lilypond = find_lilypond(cfg.lilypond)  # fail before any parsing if it is missing
    units = [u for s in cfg.sources for u in list_units(s, download_cache, cfg.seed, cfg.limits)]
    workers = worker_count(cfg.workers)
    log.info("%d pieces from %d source(s), %d worker(s)", len(units), len(cfg.sources), workers)
    parsed = parse_units(units, cfg)
    skipped = check_skips(parsed, cfg.max_skip_fraction)
    dropped: Counter[str] = sum((p.dropped for p in parsed), Counter())
    systems = [(s, p.unit.collection) for p in parsed for s in p.systems]
    systems += synthetic(len(systems), cfg)
    made: Counter[str] = Counter()
    entries = plan(systems, cfg, made)
    check_splits(entries, cfg, "after parsing")  # before the costly rendering
    outcomes = render_all(entries, cfg, lilypond, out)
    dropped.update(r for r in outcomes if r is not None)
    kept = [e for e, r in zip(entries, outcomes, strict=True) if r is None]
    lines, page_dropped = page_entries(parsed, cfg, lilypond, out)
    kept += lines
    dropped.update(page_dropped)
    check_splits(kept, cfg, "after rendering")
    stats = summarize(kept, skipped, dropped) | {
        "triplet_systems": made["triplet_systems"],
        "dotted_systems": made["dotted_systems"],
        "cut_time_systems": made["cut_time_systems"],
    }
    log.info("kept %d systems %s; dropped %s", len(kept), stats["systems"], dict(dropped))
    return [asdict(e) for e in kept], stats
