"""Pages engraved by Verovio in its five music fonts, cut by the page cutter into the systems
Verovio laid out (its own SVG says where each system's staff lines are)."""

from __future__ import annotations

import pytest
from music21 import corpus
from music21.musicxml.m21ToXml import GeneralObjectExporter

from sonfolio.config.infer import PageSplit
from sonfolio.score.common.page import ink_mask, longest_runs, split_page
from sonfolio.score.data.verovio_pages import FONTS, engrave_pages

CUT = PageSplit(staff_line_fraction=0.3, min_staff_lines=4, short_staff_spaces=12, max_skew_deg=2)
# bwv101.7's alto: Verovio leaves its last system one bar long, at its natural width
PIECES = {"short_last": ("bach/bwv101.7", 1), "two_systems": ("bach/bwv66.6", 0)}


@pytest.fixture(scope="module")
def musicxml():
    out = {}
    for key, (name, part) in PIECES.items():
        out[key] = GeneralObjectExporter(corpus.parse(name).parts[part]).parse().decode()
    return out


def cut_matches_layout(page, cfg):
    boxes = split_page(page.gray, cfg)
    inside = all(
        b.top <= s.top and s.bottom <= b.bottom for b, s in zip(boxes, page.systems, strict=False)
    )
    return len(boxes) == len(page.systems) and inside


@pytest.mark.parametrize("font", FONTS)
@pytest.mark.parametrize("piece", sorted(PIECES))
def test_a_verovio_page_is_cut_into_its_systems(musicxml, piece, font):
    (page,) = engrave_pages(musicxml[piece], font)
    assert len(page.systems) >= 2
    assert all(s.measures for s in page.systems)  # each system says which bars it holds
    assert cut_matches_layout(page, CUT)


def test_the_short_last_line_is_what_a_width_share_alone_would_drop(musicxml):
    (page,) = engrave_pages(musicxml["short_last"], "Leipzig")
    runs = longest_runs(ink_mask(page.gray))
    last = page.systems[-1]
    assert runs[round(last.top)] < CUT.staff_line_fraction * runs.max()  # a short staff
    assert len(last.measures) == 1
    blind = CUT.model_copy(update={"short_staff_spaces": 1000})  # no second pass
    assert not cut_matches_layout(page, blind)
    assert cut_matches_layout(page, CUT)


def test_systems_number_their_measures_in_order(musicxml):
    (page,) = engrave_pages(musicxml["two_systems"], "Bravura")
    numbers = [int(n) for s in page.systems for n in s.measures]
    assert numbers == sorted(numbers) and len(numbers) == len(set(numbers))


def test_an_unknown_font_is_named():
    with pytest.raises(ValueError, match="unknown Verovio font 'Comic'.*Leipzig"):
        engrave_pages("<score-partwise/>", "Comic")
