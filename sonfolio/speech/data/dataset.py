"""The speech manifest and its bookkeeping, shared by both sources (synthetic and hub).

One row per clip (JSONL): audio (path relative to the dataset folder), text (as written),
text_norm (`normalize(text)`, what WER is computed on), duration (s), speaker (an espeak-ng
voice such as `fr+m3`, or the corpus's speaker id), split (train, val or test).

A clip that cannot be used (unreadable or empty audio, empty text, longer than
speech_data.max_duration_s) is skipped and counted by reason; past speech_data.max_skip_fraction
of all clips the build fails and lists them.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio.speech.data.clips import SPLITS, Skip, Utterance

if TYPE_CHECKING:
    from sonfolio.config.data import SpeechData

log = logging.getLogger(__name__)


class TooManySkipped(RuntimeError):
    """More inputs were unusable than speech_data.max_skip_fraction allows."""


def check_skips(skips: list[Skip], total: int, max_fraction: float) -> Counter[str]:
    """Count skips by reason; fail, listing them, past `max_fraction` of `total` inputs.

    Raises:
        TooManySkipped: naming the key to raise and every skipped input (the first 50).
    """
    if total and len(skips) / total > max_fraction:
        listing = "\n".join(f"  {s.item}: {s.reason}" for s in skips[:50])
        more = f"\n  ... and {len(skips) - 50} more" if len(skips) > 50 else ""
        raise TooManySkipped(
            f"{len(skips)} of {total} clips could not be used ({len(skips) / total:.1%} > "
            f"speech_data.max_skip_fraction = {max_fraction}). Fix or remove these inputs, "
            f"raise speech_data.max_duration_s if they are too_long, or raise the fraction:\n"
            f"{listing}{more}"
        )
    reasons = Counter(s.reason for s in skips)
    if skips:
        log.warning("skipped %d of %d clips: %s", len(skips), total, dict(reasons))
    return reasons


def summarize(rows: list[Utterance], skipped: Counter[str], source: str) -> dict[str, Any]:
    durations = sorted(r.duration for r in rows) or [0.0]
    return {
        "source": source,
        "utterances": {s: sum(r.split == s for r in rows) for s in SPLITS},
        "hours": {
            s: round(sum(r.duration for r in rows if r.split == s) / 3600, 4) for s in SPLITS
        },
        "speakers": {s: len({r.speaker for r in rows if r.split == s}) for s in SPLITS},
        "duration_s": {
            "min": round(durations[0], 3),
            "median": round(statistics.median(durations), 3),
            "max": round(durations[-1], 3),
        },
        "skipped": dict(skipped),
    }


def check_splits(rows: list[Utterance], cfg: SpeechData) -> None:
    """Fail when val (training needs it) or a configured test split has no clip, saying what
    to change, instead of exit 0 here and an error in training or evaluation later.

    Raises:
        ValueError: naming the split and the keys to change.
    """
    if cfg.source == "synthetic":
        fixes = {
            s: f"raise speech_data.synthetic.utterances or speech_data.synthetic.{s}_fraction"
            for s in ("val", "test")
        }
    else:
        fixes = {"val": "set speech_data.hub.splits.val to a split of the corpus with clips"}
        if cfg.hub.splits.test is not None:
            fixes["test"] = "raise speech_data.hub.max_samples or set speech_data.hub.splits.test"
    for split, fix in fixes.items():
        if not any(r.split == split for r in rows):
            raise ValueError(
                f"speech_data ({cfg.source}) gave {len(rows)} clips but 0 {split} clips: {fix} "
                "in params.yaml (skipped clips, counted in the stats, may have emptied it)"
            )


def build(cfg: SpeechData, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write the clips of `cfg.source` into `out`; their manifest rows and the stats.

    Raises:
        TooManySkipped: more clips than speech_data.max_skip_fraction could not be used.
        DatasetUnavailable: source: hub and the corpus cannot be opened.
        ValueError: an unknown espeak-ng voice variant, or no train clip at all.
    """
    # Imported here: both sources import this module's rows (Utterance, Skip).
    from sonfolio.speech.data import hub, synthetic

    make = synthetic.build if cfg.source == "synthetic" else hub.build
    rows, skips = make(cfg, out)
    skipped = check_skips(skips, len(rows) + len(skips), cfg.max_skip_fraction)
    if not any(r.split == "train" for r in rows):
        raise ValueError(f"speech_data ({cfg.source}) gave no train clip: check its settings")
    check_splits(rows, cfg)
    stats = summarize(rows, skipped, cfg.source)
    log.info(
        "%d clips %s, %s h; skipped %s",
        len(rows),
        stats["utterances"],
        stats["hours"],
        stats["skipped"],
    )
    return [asdict(r) for r in rows], stats
