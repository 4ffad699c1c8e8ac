"""Build the score dataset: pieces -> canonical systems -> splits -> rendered images.

Parsing and rendering run in a pool of processes (music21 and LilyPond are single-threaded).
Splits are by piece, so no piece has systems in two splits, plus a held-out split made of whole
collections to measure generalisation to music the model never saw the like of.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sonfolio.config import ScoreData, ScoreSplit
from sonfolio.score.convert import (
    SourceError,
    System,
    abc_tune_score,
    abc_tunes,
    pieces_from_file,
    systems_from_score,
)
from sonfolio.score.render import RenderJob, RenderSettings
from sonfolio.score.sources import Unit
from sonfolio.score.synth import synth_systems

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test", "heldout")


@dataclass
class Parsed:
    """What one unit gave: its systems, or why it was skipped."""

    unit: Unit
    systems: list[System] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    skip_reason: str | None = None


@dataclass(frozen=True)
class Entry:
    """One row of the manifest."""

    image: str  # relative to the dataset folder
    text: str
    piece: str
    collection: str
    split: str


def parse_unit(unit: Unit, bars_per_system: int) -> Parsed:
    """Parse one piece and cut it into canonical systems; never raises for a bad file."""
    try:
        if unit.tune is None:
            scores = pieces_from_file(unit.path)
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
    if not parsed.systems and not parsed.dropped:
        parsed.skip_reason = "empty"
    return parsed


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


def plan(systems: list[tuple[System, str]], cfg: ScoreData) -> list[Entry]:
    """Assign splits and image paths; stable order so ids never depend on worker timing."""
    entries: list[Entry] = []
    counters: Counter[str] = Counter()
    for system, collection in sorted(systems, key=lambda sc: (sc[0].piece, sc[0].index)):
        split = split_of(system.piece, collection, cfg.split)
        image = f"images/{split}/{counters[split]:06d}.png"
        counters[split] += 1
        entries.append(Entry(image, system.text, system.piece, collection, split))
    return entries


def render_jobs(entries: Sequence[Entry], cfg: ScoreData, out: Path) -> list[RenderJob]:
    return [
        RenderJob(
            e.text,
            out / e.image,
            augment_seed(cfg.seed, e.image) if e.split == "train" else None,
        )
        for e in entries
    ]


def synthetic(n_real: int, cfg: ScoreData) -> list[tuple[System, str]]:
    f = cfg.synthetic_fraction
    n = round(n_real * f / (1.0 - f)) if f > 0 else 0
    return [(s, "synthetic") for s in synth_systems(n, cfg.seed, cfg.bars_per_system)]


def render_settings(cfg: ScoreData, lilypond: Path) -> RenderSettings:
    return RenderSettings(lilypond, cfg.resolution_dpi, cfg.image_long_side, cfg.augment)
