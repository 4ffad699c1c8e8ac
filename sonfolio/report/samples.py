"""How a track's eval samples are shown: the side-by-side images, or the worst clips to play.

A track's report face names its view (`eval_samples`, a key of VIEWS); each view copies what it
shows into the report folder, so every link stays inside it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio.report.items import Figure, Gallery, Item, Media, Table, fmt
from sonfolio.report.sources import Sources, missing

if TYPE_CHECKING:
    from sonfolio.config.report import Report


@dataclass(frozen=True)
class SampleSplit:
    """One split of the variant whose eval samples the page shows."""

    track: str
    variant: str
    split: str
    metrics: dict[str, Any]  # what the eval measured on that split (speech: its worst clips)


def copy_asset(file: Path, out: Path, rel: str) -> str:
    """`file` copied to `rel` under the report folder `out`; returns `rel`, the page's link."""
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(file, out / rel)
    return rel


def predictions_by_sample(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)
    return {r["sample"]: r for r in rows if r.get("sample")}


def image_samples(at: SampleSplit, src: Sources, out: Path, cfg: Report) -> Item:
    """The side-by-side PNGs (input, prediction render, truth render) the eval wrote under
    samples/<variant>/<split>/, copied: the worst by SER, then a seeded random draw."""
    folder = src.evals[at.track] / "samples" / at.variant / at.split
    if not folder.is_dir():
        return missing(folder, at.track, "eval")
    preds = predictions_by_sample(folder / "predictions.jsonl")
    figures = []
    for kind in ("worst", "random"):
        for png in sorted(folder.glob(f"{kind}_*.png"))[: cfg.score_samples]:
            rel = f"assets/samples/{at.track}/{at.variant}/{at.split}/{png.name}"
            p = preds.get(png.stem, {})
            detail = f" — SER {fmt(p['ser'])}, {p.get('compile', '?')}" if "ser" in p else ""
            figures.append(Figure(copy_asset(png, out, rel), f"{png.stem}{detail}"))
    return Gallery(
        f"{at.variant}, {at.split} split: worst by SER, then a seeded random draw", figures
    )


def clip_samples(at: SampleSplit, src: Sources, out: Path, cfg: Report) -> Item:
    """The worst clips by WER the eval named in its metrics, with their audio (copied, so the
    page plays them) and paths."""
    rows: list[list[str | Media]] = []
    for k, w in enumerate(at.metrics.get("worst", [])[: cfg.speech_worst]):
        audio = src.root / w["audio"]
        cell: str | Media = "(file absent)"
        if audio.is_file():
            rel = f"assets/audio/{at.variant}/{at.split}/{k + 1:02d}_{audio.name}"
            cell = Media("audio", copy_asset(audio, out, rel), audio.name)
        rows.append([fmt(w.get("wer")), w["audio"], cell, w.get("ref", ""), w.get("hyp", "")])
    return Table(
        f"Worst clips by WER: {at.variant}, {at.split} split",
        ["WER", "audio path", "listen", "reference", "prediction"],
        rows,
    )


# A track's report face names its view: `eval_samples`.
VIEWS: dict[str, Callable[[SampleSplit, Sources, Path, Report], Item]] = {
    "images": image_samples,
    "clips": clip_samples,
}
