"""Train pages showing their back's print through (score_data.pages.bleed): the ghost is the
part's next page, mirrored and faint; the page cutter still finds each line where the clean
page has it, so every line keeps its text. And train pages made scan-like whole
(score_data.pages.scan): degraded by the drawn kinds, seeded, and cut where the clean page is."""

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
from sonfolio.score.common.page import split_page
from sonfolio.score.common.pages import Layout, engrave
from sonfolio.score.data.convert import systems_from_score
from sonfolio.score.data.dataset import WHOLE_PART, render_settings
from sonfolio.score.data.page_data import _bled, _scanned
from sonfolio.score.data.parse import pieces_from_file


@pytest.fixture(scope="module")
def two_pages(tmp_path_factory):
    """Two chorale parts engraved as one page each (a part's next page stands in)."""
    cfg = load_params().score_data
    exe = find_lilypond()
    tmp = tmp_path_factory.mktemp("bleed")
    grays = []
    for name, part in (("bach/bwv66.6", 0), ("bach/bwv40.8", 1)):
        [(_, score)] = pieces_from_file(Path(corpus.getWork(name)))
        text = systems_from_score(score, name, WHOLE_PART)[0][part].text
        length = sum(bar_lengths(text), Fraction(0))
        [page] = engrave(text, length, Layout("a4", 26.0), tmp / name, exe, cfg.pages.dpi, 60)
        grays.append(Image.open(page.png).convert("L"))
    return cfg, render_settings(cfg, exe), grays


def test_a_bled_page_shows_its_neighbour_mirrored_under_its_own_ink(two_pages) -> None:
    cfg, render, grays = two_pages
    bled = _bled(grays, 1.0, render, seed=7)
    page, back = np.asarray(grays[0], dtype=int), np.asarray(grays[1], dtype=int)
    out = np.asarray(bled[0], dtype=int)
    assert out.shape == page.shape and (out <= page).all()  # only darker, never lighter
    ghost = (out < page) & (page == 255)  # grey where the page itself is bare paper
    assert ghost.sum() > 1000
    # the ghost is the back mirrored left to right (shifted a little up or down, not sideways)
    mirrored_ink = back[:, ::-1] < 128
    shifts = [np.roll(mirrored_ink, s, axis=0)[ghost].mean() for s in range(-40, 41)]
    assert max(shifts) > 0.6
    # faint: at most score_data.scan.bleed of the ink's darkness
    assert (255 - out[ghost]).max() <= round(255 * cfg.scan.bleed) + 1
    # seeded: the same pages bleed the same way
    assert (np.asarray(_bled(grays, 1.0, render, seed=7)[0]) == out).all()


def test_no_page_bleeds_at_share_zero(two_pages) -> None:
    _, render, grays = two_pages
    assert _bled(grays, 0.0, render, seed=7) == grays


def test_the_cutter_finds_each_line_of_a_bled_page_where_the_clean_page_has_it(two_pages):
    cfg, render, grays = two_pages
    for seed in range(3):
        for clean, bled in zip(grays, _bled(grays, 1.0, render, seed), strict=True):
            want = split_page(np.asarray(clean), cfg.pages.cut)
            got = split_page(np.asarray(bled), cfg.pages.cut)
            assert len(got) == len(want) >= 2
            for a, b in zip(got, want, strict=True):
                assert abs(a.top - b.top) <= 6 and abs(a.bottom - b.bottom) <= 6, (seed, a, b)


def test_a_page_made_scan_like_whole_is_degraded_by_drawn_kinds_and_seeded(two_pages) -> None:
    cfg, render, grays = two_pages
    every = cfg.pages.model_copy(update={"scan": 1.0})
    pages, which = _scanned(grays, every, render, seed=3)
    assert which == [True, True]
    for clean, page in zip(grays, pages, strict=True):
        assert (
            np.asarray(page).shape != np.asarray(clean).shape
            or (np.asarray(page) != np.asarray(clean)).any()
        )
    again, _ = _scanned(grays, every, render, seed=3)
    assert all((np.asarray(a) == np.asarray(b)).all() for a, b in zip(pages, again, strict=True))
    none = cfg.pages.model_copy(update={"scan": 0.0})
    assert _scanned(grays, none, render, seed=3) == (grays, [False, False])


def test_the_cutter_finds_each_line_of_a_page_made_scan_like_where_the_clean_page_has_it(
    two_pages,
) -> None:
    """Thresholded, bled through, resampled to another dpi: each line's box holds the middle of
    the clean page's box (scaled) and of no other, so no line of a scan-like train page takes
    another line's text."""
    cfg, render, grays = two_pages
    every = cfg.pages.model_copy(update={"scan": 1.0})
    resampled = set()
    for seed in range(6):
        pages, _ = _scanned(grays, every, render, seed)
        for clean, page in zip(grays, pages, strict=True):
            scale = page.height / clean.height
            resampled.add(scale < 1)
            middles = [
                (b.top + b.bottom) / 2 * scale for b in split_page(np.asarray(clean), cfg.pages.cut)
            ]
            got = split_page(np.asarray(page), cfg.pages.cut)
            assert len(got) == len(middles) >= 2, seed
            for k, box in enumerate(got):
                held = [j for j, m in enumerate(middles) if box.top <= m <= box.bottom]
                assert held == [k], (seed, k, box, middles)
    assert resampled == {True, False}  # some pages resampled by `dpi`, some not
