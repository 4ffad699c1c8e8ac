"""A second engraver: Verovio, with the SMuFL music fonts it ships.

Every image the score model learnt from was engraved by LilyPond in its one font
(Emmentaler); the music people own was set by other programs in other fonts. Verovio engraves
MusicXML with its own spacing, beaming, stems and slurs, in Leipzig, Bravura, Gootville, Leland
or Petaluma (a handwritten style), and lays a piece out on pages itself, breaking systems where
it chooses. `engrave_pages` renders a piece's MusicXML (music21 writes it) into page images and
says, for each page, which systems it holds and which measures each system holds: the truth of
each page line comes from the engraver's own layout, read from the SVG it writes, not guessed
from the image. `engrave_system` engraves one canonical system on one line, as the data stage's
system images are.

Rasterised with resvg (PyPI `resvg-py`: one self-contained wheel, no system Cairo needed); the
SVG draws every music glyph as a path from its own definitions. Its text (bar numbers, tuplet
and dynamic words) asks for "Times, serif": resvg takes it from the STIX fonts matplotlib ships
(Times-like) and never from the machine's own fonts (`_png`), so a page renders the same on
every machine. With the system's fonts, a machine without any (a fresh container) drew no bar
numbers, and installing one (chromium's packages bring DejaVu and Liberation) changed 3,035 of
the data stage's 8,734 images, so a fresh clone's model depended on what else was installed.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

# Verovio's SMuFL fonts, as its toolkit names them. Which the data stage trains on and which
# it keeps out as the held-out engraving is params.yaml's (score_data.engravers).
FONTS = ("Leipzig", "Bravura", "Gootville", "Leland", "Petaluma")
PAGE_UNITS = (21000, 29700)  # A4 in Verovio's units (a tenth of a pixel at scale 100)
MARGIN_UNITS = 500  # Verovio's page margin, the offset of its `page-margin` group
_SVG = "{http://www.w3.org/2000/svg}"


@dataclass(frozen=True)
class SystemLayout:
    """One system of an engraved page: its staff lines' rows (px) and its measures' numbers."""

    top: float  # the top staff line's row
    bottom: float  # the bottom staff line's row
    measures: tuple[str, ...]  # the measures' `n` (MusicXML's measure numbers), in order


@dataclass(frozen=True)
class EngravedPage:
    gray: np.ndarray  # (H, W) uint8, black ink on white paper
    systems: tuple[SystemLayout, ...]  # top to bottom


def engrave_pages(musicxml: str, font: str, width_px: int = 2100) -> list[EngravedPage]:
    """Every page Verovio lays `musicxml` out on, in `font`, as `width_px`-wide grey images
    with their systems (A4 proportions).

    Raises:
        ValueError: `font` is not one of FONTS, or Verovio cannot read the MusicXML.
    """
    tk = _toolkit(
        musicxml,
        font,
        pageWidth=PAGE_UNITS[0] // 10,
        pageHeight=PAGE_UNITS[1] // 10,
        breaks="auto",
        mmOutput=False,
    )
    pages = []
    for number in range(1, tk.getPageCount() + 1):
        svg = tk.renderToSVG(number)
        scale = width_px / PAGE_UNITS[0]
        with Image.open(io.BytesIO(_png(svg, width=width_px))) as img:
            gray = np.asarray(img.convert("L"))
        systems = tuple(_systems(svg, scale, tk))
        pages.append(EngravedPage(gray, systems))
    return pages


def _systems(svg: str, scale: float, tk: object) -> list[SystemLayout]:
    """The systems of one page's SVG (Verovio's own, so trusted): each `g.system`'s staff
    lines (`g.staff > path`, horizontal `M x y L x2 y`) and its `g.measure`s' numbers."""
    root = ET.fromstring(svg)
    found = []
    for system in root.iter(f"{_SVG}g"):
        if system.get("class") != "system":
            continue
        rows: list[float] = []
        measures: list[str] = []
        for g in system.iter(f"{_SVG}g"):
            kind = (g.get("class") or "").split()
            if "measure" in kind:
                measures.append(str(tk.getElementAttr(g.get("id")).get("n", "")))
            if "staff" in kind:
                for path in g.findall(f"{_SVG}path"):
                    d = (path.get("d") or "").replace("M", "").replace("L", "").split()
                    if len(d) == 4 and d[1] == d[3]:
                        rows.append((float(d[1]) + MARGIN_UNITS) * scale)
        if rows:
            found.append(SystemLayout(min(rows), max(rows), tuple(measures)))
    return sorted(found, key=lambda s: s.top)


def engrave_system(
    text: str, font: str, time: str | None = None, first_bar: int | None = None
) -> np.ndarray:
    """One canonical system engraved by Verovio in `font` on one line, as a grey image cropped
    to the music (Verovio sizes the page to it), staff space 18 px. `time`: the time signature
    in force when the header prints none (kept for beaming, not drawn); `first_bar`: the
    number of its first bar.

    Raises:
        ValueError: `font` is not one of FONTS, or Verovio cannot read the MusicXML.
    """
    from sonfolio.score.common.musicxml import musicxml_bytes, score_of

    xml = musicxml_bytes(score_of([(text, None)], time=time, first_bar=first_bar))
    # one line however long, the page as large as the music
    tk = _toolkit(xml.decode("utf-8"), font, breaks="none", adjustPageWidth=True,
                  adjustPageHeight=True)  # fmt: skip
    with Image.open(io.BytesIO(_png(tk.renderToSVG(1)))) as img:
        return np.asarray(img.convert("L"))


TEXT_FONT = "STIXGeneral"  # the family of matplotlib's STIX fonts, Times-like


@functools.cache
def text_fonts() -> tuple[str, ...]:
    """The files of the text font every SVG is rendered with (matplotlib's STIXGeneral: regular,
    italic, bold, bold italic), from the installed matplotlib, found without importing it.

    Raises:
        RuntimeError: matplotlib, a dependency of the project, is not installed.
    """
    spec = importlib.util.find_spec("matplotlib")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        files = sorted((Path(folder) / "mpl-data" / "fonts" / "ttf").glob(f"{TEXT_FONT}*.ttf"))
        if files:
            return tuple(str(f) for f in files)
    raise RuntimeError(
        f"no {TEXT_FONT} font files in matplotlib's mpl-data/fonts/ttf: Verovio's text is "
        "rendered with them; reinstall the project (`pip install -e .` installs matplotlib)"
    )


def _png(svg: str, width: int | None = None) -> bytes:
    """An SVG of Verovio's as PNG bytes on white, its text in TEXT_FONT and never in a font
    of the machine's (resvg loads none of them)."""
    import resvg_py

    png = resvg_py.svg_to_bytes(
        svg_string=svg,
        width=width,
        background="white",
        skip_system_fonts=True,
        font_files=list(text_fonts()),
        serif_family=TEXT_FONT,
        font_family=TEXT_FONT,
    )
    return bytes(png)


def _toolkit(musicxml: str, font: str, **options: object) -> Any:
    """A Verovio toolkit holding `musicxml`, engraving in `font` at scale 100 with no header
    or footer (what is engraved is music), and `options`.

    Raises:
        ValueError: `font` is not one of FONTS, or Verovio cannot read the MusicXML.
    """
    import verovio

    if font not in FONTS:
        raise ValueError(f"unknown Verovio font {font!r}; choose one of {', '.join(FONTS)}")
    tk = verovio.toolkit()
    tk.setOptions({"font": font, "scale": 100, "header": "none", "footer": "none", **options})
    if not tk.loadData(musicxml):
        raise ValueError("Verovio could not read the MusicXML")
    return tk
