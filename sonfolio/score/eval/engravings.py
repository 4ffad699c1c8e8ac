"""The held-out pages of each engraving the eval reads (score_eval.pages.engravings).

A user's music was not engraved by our training engraver: the evaluation reads the same
held-out parts as pages from more than one engraver and, for each, as a clean render and as a
scan or photo of it. Each page comes with the span of the piece it holds, proven by its
engraver's own layout, so its truth is the notes whose onset lies in that span.

- `lilypond`: LilyPond's default layout (sonfolio.score.common.pages: its page-post-process
  hook reports each line's moments);
- `verovio:<font>`: Verovio's layout in a SMuFL font (sonfolio.score.common.verovio: its SVG
  names each system's measures; the MusicXML it engraves is the part's canonical text written
  by sonfolio.score.common.musicxml, whose measures give their moments);
- `+scan` after either: each page made to look scanned or photographed with every kind of
  sonfolio.score.common.scan at score_data.scan's strength, seeded per page; `+scan:<kind>`
  (or several, `+scan:curl,dpi`): those kinds only, a held-out measure per kind.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from sonfolio.config.data import SCAN_KINDS
from sonfolio.config.eval import ENGRAVING_PATTERN

if TYPE_CHECKING:
    from sonfolio.config.data import Scan

ENGRAVING = re.compile(ENGRAVING_PATTERN)
A4_WIDTH_IN = 210 / 25.4


class LayoutUnknown(Exception):
    """An engraver's layout does not account for the whole piece: its pages are not read."""


@dataclass(frozen=True)
class HeldOutPage:
    png: Path
    start: Fraction  # the moment (whole notes from the piece's start) its first line begins
    end: Fraction  # and its last line ends
    systems: int  # its lines, as its engraver laid them out


def verovio_pages(text: str, font: str, work: Path, dpi: int) -> list[HeldOutPage]:
    """The piece (one valid canonical text) engraved by Verovio in `font` on A4 pages at
    `dpi`, each with the span its systems hold.

    Raises:
        LayoutUnknown: Verovio's systems do not hold every measure once, in order.
    """
    from music21 import stream

    from sonfolio.score.common.musicxml import musicxml_bytes, score_of
    from sonfolio.score.common.verovio import engrave_pages

    score = score_of([(text, None)])
    spans = {
        str(m.number): (Fraction(m.offset) / 4, Fraction(m.offset + m.quarterLength) / 4)
        for m in score.parts[0].getElementsByClass(stream.Measure)
    }
    engraved = engrave_pages(musicxml_bytes(score).decode("utf-8"), font, round(A4_WIDTH_IN * dpi))
    laid = [n for page in engraved for s in page.systems for n in s.measures]
    if laid != list(spans):
        raise LayoutUnknown(f"Verovio laid out measures {laid[:8]}..., the piece has {len(spans)}")
    work.mkdir(parents=True, exist_ok=True)
    pages = []
    for k, page in enumerate(engraved, 1):
        measures = [n for s in page.systems for n in s.measures]
        png = work / f"verovio-{font}-{k}.png"
        Image.fromarray(page.gray).save(png)
        start, end = spans[measures[0]][0], spans[measures[-1]][1]
        pages.append(HeldOutPage(png, start, end, len(page.systems)))
    return pages


def scan_kinds(name: str) -> tuple[str, ...]:
    """The scan kinds engraving `name`'s pages get: none for a clean one, every kind for
    `+scan`, the named ones for `+scan:<kind>[,<kind>...]`."""
    match = ENGRAVING.fullmatch(name)
    if match is None:
        raise ValueError(
            f"engraving {name!r}: write lilypond or verovio:<font>, maybe +scan or "
            f"+scan:<kind>[,<kind>...] (kinds: {', '.join(SCAN_KINDS)})"
        )
    if not match.group(3):
        return ()
    return tuple(match.group(4).split(",")) if match.group(4) else SCAN_KINDS


def scanned(
    page: HeldOutPage, dpi: int, cfg: Scan, key: str, kinds: tuple[str, ...] = SCAN_KINDS
) -> HeldOutPage:
    """`page` made to look scanned or photographed (`kinds`: every kind), seeded by `key`."""
    from sonfolio.score.common.scan import scan_like

    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")
    with Image.open(page.png) as img:
        gray = np.asarray(img.convert("L"))
    png = page.png.with_name(f"{page.png.stem}-scan-{'-'.join(kinds)}.png")
    Image.fromarray(scan_like(gray, dpi, cfg, seed, kinds)).save(png)
    return HeldOutPage(png, page.start, page.end, page.systems)
