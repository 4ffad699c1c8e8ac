"""A staff whose lines a thresholded low-dpi scan or a worn print broke into dashes is still
found (infer.score.page.line_gap_spaces bridges the gaps), and the bridging leaves alone every staff
the cutter found before: a title's bold letters, bridged, make a bar as tall as they are,
which must not become a staff line and pull the title into the first system."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from music21 import corpus
from PIL import Image

from sonfolio.config.params import load_params
from sonfolio.score.common.canonical import bar_lengths
from sonfolio.score.common.lilypond import find_lilypond
from sonfolio.score.common.page import find_staves, split_page
from sonfolio.score.common.pages import Layout, engrave
from sonfolio.score.data.convert import systems_from_score
from sonfolio.score.data.dataset import WHOLE_PART
from sonfolio.score.data.parse import pieces_from_file

# in capitals, bridged, its serifs and bars make thin rows about a staff space apart: at 100 dpi
# they made a fifth staff of this page before bridged staves had to be spaced as the others
TITLE = "MIT DEM PFEIL DEM BOGEN"


@pytest.fixture(scope="module", params=["pages_dpi", 100])
def page(request, tmp_path_factory):
    """A chorale's bass part engraved as one A4 page (four systems) under a bold title, at the
    data stage's dpi and at a low scan's 100: (page grey, the cutter's settings as infer.score.page
    has them)."""
    params = load_params()
    [(_, score)] = pieces_from_file(Path(corpus.getWork("bach/bwv40.8")))
    parts = systems_from_score(score, "bach/bwv40.8", WHOLE_PART)[0]
    text = parts[3].text
    length = sum(bar_lengths(text), Fraction(0))
    tmp = tmp_path_factory.mktemp("broken")
    layout = Layout("a4", 20.0, title=TITLE, composer="after an old tune")
    [first, *_] = engrave(
        text, length, layout, tmp, find_lilypond(),
        params.score_data.pages.dpi if request.param == "pages_dpi" else request.param, 60,
    )  # fmt: skip
    gray = np.asarray(Image.open(first.png).convert("L"))
    return gray, params.infer.score.page


def _broken(gray: np.ndarray, rows: tuple[int, int], space: float) -> np.ndarray:
    """`gray` with the staff lines within `rows` cut into dashes one space long, a quarter of a
    space apart: no run on them is longer than a space (the cutter looks for runs over a third
    of the page's longest, or a strip's, or twelve spaces)."""
    out = gray.copy()
    dash, gap = round(space), max(1, round(space / 4))
    cols = np.arange(gray.shape[1])
    out[rows[0] : rows[1] + 1, (cols % (dash + gap)) >= dash] = 255
    return out


def test_a_staff_whose_lines_are_broken_into_dashes_is_found_where_it_was(page) -> None:
    gray, cfg = page
    clean = split_page(gray, cfg)
    staves = find_staves(gray, cfg)
    assert len(clean) == len(staves) >= 3
    top, bottom = staves[1]
    broken = _broken(gray, (top, bottom), (bottom - top) / 4)
    # the control: without bridging, the broken staff is not found, and its system is lost
    blind = split_page(broken, cfg.model_copy(update={"line_gap_spaces": 0.0}))
    assert len(blind) == len(clean) - 1
    got = split_page(broken, cfg)
    assert len(got) == len(clean)
    for a, b in zip(got, clean, strict=True):
        assert abs(a.top - b.top) <= 3 and abs(a.bottom - b.bottom) <= 3, (a, b)


def test_bridging_leaves_a_page_whose_staves_were_all_found_as_it_was_cut(page) -> None:
    gray, cfg = page
    off = cfg.model_copy(update={"line_gap_spaces": 0.0})
    wide = cfg.model_copy(update={"line_gap_spaces": 2.0})  # the widest the schema allows
    assert split_page(gray, wide) == split_page(gray, cfg) == split_page(gray, off)
    # the title over the first staff stays out of its system at every bridge
    first = split_page(gray, wide)[0]
    ink_rows = np.flatnonzero((gray < 128).any(axis=1))
    assert first.top > ink_rows[0] + 10  # the title's rows are above the first box
