"""Pages engraved by Verovio in its five music fonts, clean and made to look scanned or
photographed, cut by the page cutter into the systems Verovio laid out (its own SVG says where
each system's staff lines are)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from music21 import corpus
from music21.musicxml.m21ToXml import GeneralObjectExporter
from PIL import Image

from sonfolio.config.page import PageSplit
from sonfolio.score.common.page import deskew, ink_mask, longest_runs, split_page
from sonfolio.score.common.scan import KINDS, scan_like
from sonfolio.score.common.verovio import FONTS, engrave_pages

VEROVIO_DPI = 254  # an A4 page 2100 px wide

CUT = PageSplit(
    staff_line_fraction=0.3,
    min_staff_lines=4,
    short_staff_spaces=12,
    strips=8,
    line_gap_spaces=0.5,
    max_skew_deg=2,
    reach_spaces=6,
    own_ink_only=True,
)
# bwv101.7's alto: Verovio leaves its last system one bar long, at its natural width
PIECES = {"short_last": ("bach/bwv101.7", 1), "two_systems": ("bach/bwv66.6", 0)}


@pytest.fixture(scope="module")
def musicxml():
    out = {}
    for key, (name, part) in PIECES.items():
        out[key] = GeneralObjectExporter(corpus.parse(name).parts[part]).parse().decode()
    return out


def cut_matches_layout(page, cfg, gray=None):
    """The cut gives one box per system Verovio laid out, each around its staff's rows
    (`gray`: a degraded copy of the page, whose rows moved: the count alone)."""
    boxes = split_page(page.gray if gray is None else gray, cfg)
    if gray is not None:
        return len(boxes) == len(page.systems)
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
    blind = CUT.model_copy(update={"short_staff_spaces": 1000, "strips": 1})  # width share only
    assert not cut_matches_layout(page, blind)
    assert cut_matches_layout(page, CUT)


def test_systems_number_their_measures_in_order(musicxml):
    (page,) = engrave_pages(musicxml["two_systems"], "Bravura")
    numbers = [int(n) for s in page.systems for n in s.measures]
    assert numbers == sorted(numbers) and len(numbers) == len(set(numbers))


def test_a_bar_number_is_drawn_in_the_projects_text_font_never_the_machines(monkeypatch):
    """Verovio's text (a bar number) is rendered in matplotlib's STIX fonts, with resvg told to
    load none of the machine's: a machine with no fonts drew no bar numbers, and installing
    some changed a third of the data stage's images (so the model depended on them)."""
    import resvg_py

    from sonfolio.score.common import verovio

    calls = []
    render = resvg_py.svg_to_bytes

    def spy(**kwargs):
        calls.append(kwargs)
        return render(**kwargs)

    monkeypatch.setattr(resvg_py, "svg_to_bytes", spy)
    text = "\\clef treble \\key g \\major \\time 3/4 d''4 b'8 c''8 d''4 | g'4 a'8 b'8 c''4"
    numbered = verovio.engrave_system(text, "Leipzig", first_bar=13)
    plain = verovio.engrave_system(text, "Leipzig")  # bar 1: no number printed
    assert numbered.shape == plain.shape
    number = numbered.astype(int) - plain.astype(int) < -128  # ink only the number has
    assert number.sum() > 50
    ys, _ = np.nonzero(number)
    top_line = np.flatnonzero(longest_runs(ink_mask(plain)) > 0.5 * plain.shape[1])[0]
    assert ys.max() < top_line  # over the staff, where Verovio prints it
    assert calls and all(c["skip_system_fonts"] for c in calls)
    assert all(Path(f).name.startswith("STIXGeneral") for c in calls for f in c["font_files"])


def test_an_unknown_font_is_named():
    with pytest.raises(ValueError, match="unknown Verovio font 'Comic'.*Leipzig"):
        engrave_pages("<score-partwise/>", "Comic")


@pytest.fixture(scope="module")
def pages(musicxml):
    return [
        (page, font)
        for k, (key, font) in enumerate(zip(sorted(PIECES) * 2, FONTS[:4], strict=True))
        for page in engrave_pages(musicxml[key], font)
    ]


def scanned(page, params, seed, kinds):
    gray = scan_like(page.gray, VEROVIO_DPI, params.score_data.scan, seed, kinds)
    level, _ = deskew(
        Image.fromarray(gray), params.infer.score.page.max_skew_deg, params.infer.score.image
    )
    return np.asarray(level)


@pytest.mark.parametrize("kind", [*KINDS, "all"])
def test_a_scanned_or_photographed_page_is_cut_into_its_systems(pages, params, kind):
    """Each degradation at params.yaml's strength, and all of them at once, 3 seeds."""
    kinds = KINDS if kind == "all" else (kind,)
    cfg = params.infer.score.page
    for seed in range(3):
        for page, font in pages:
            gray = scanned(page, params, seed, kinds)
            assert cut_matches_layout(page, cfg, gray), (kind, seed, font)


def test_bent_staff_lines_need_the_strips(pages, params):
    """The control: without the strips a photographed page loses staves."""
    flat = params.infer.score.page.model_copy(update={"strips": 1})
    missed = sum(
        not cut_matches_layout(page, flat, scanned(page, params, seed, KINDS))
        for seed in range(3)
        for page, _ in pages
    )
    assert missed > 0


def test_a_scan_is_the_same_for_the_same_seed_and_names_an_unknown_kind(pages, params):
    page = pages[0][0]
    assert np.array_equal(scanned(page, params, 5, KINDS), scanned(page, params, 5, KINDS))
    assert not np.array_equal(scanned(page, params, 5, KINDS), scanned(page, params, 6, KINDS))
    with pytest.raises(ValueError, match=r"unknown scan degradation \['fold'\]; known: dpi"):
        scan_like(page.gray, VEROVIO_DPI, params.score_data.scan, 0, ("fold",))


def test_an_engraving_names_the_scan_kinds_its_pages_get(params):
    """`+scan`: every kind; `+scan:<kind>[,...]`: those only (a held-out measure per kind);
    eval@score's setting takes the same names and refuses an unknown kind before any work."""
    from pydantic import ValidationError

    from sonfolio.config.eval import ScoreEvalPages
    from sonfolio.score.eval.engravings import scan_kinds

    assert scan_kinds("lilypond") == ()
    assert scan_kinds("verovio:Leland+scan") == KINDS
    assert scan_kinds("lilypond+scan:curl,dpi") == ("curl", "dpi")
    with pytest.raises(ValueError, match=r"engraving 'lilypond\+scan:fold'"):
        scan_kinds("lilypond+scan:fold")
    pages = params.score_eval.pages
    ok = pages.model_copy(update={"engravings": ["lilypond", "lilypond+scan:curl"]})
    ScoreEvalPages.model_validate(ok.model_dump())
    with pytest.raises(ValidationError, match="engravings"):
        ScoreEvalPages.model_validate({**ok.model_dump(), "engravings": ["lilypond+scan:fold"]})


def test_a_page_scanned_with_one_kind_differs_from_every_kind(tmp_path, params):
    """engravings.scanned with kinds: the page gets those kinds only (a JPEG-only page keeps
    the clean page's size and is near it; every kind moves far more pixels)."""
    from sonfolio.score.eval.engravings import HeldOutPage, scanned

    clean = np.full((400, 300), 255, np.uint8)
    clean[100:104, 20:280] = 0  # a line of ink
    png = tmp_path / "page.png"
    Image.fromarray(clean).save(png)
    page = HeldOutPage(png, Fraction(0), Fraction(1), 1)
    cfg = params.score_data.scan
    jpeg = np.asarray(Image.open(scanned(page, 200, cfg, "k", ("jpeg",)).png))
    every = np.asarray(Image.open(scanned(page, 200, cfg, "k").png))
    assert jpeg.shape == clean.shape
    jpeg_change = np.abs(jpeg.astype(int) - clean).mean()
    assert jpeg_change < 5
    assert every.shape != clean.shape or np.abs(every.astype(int) - clean).mean() > jpeg_change


def margin_marks(shape, margin):
    """A blank page with nine 10 px squares: four corners, four edge middles and the centre,
    each `margin` px in from the page's edges."""
    height, width = shape
    page = np.full(shape, 255, np.uint8)
    for y in (margin, height // 2, height - margin - 10):
        for x in (margin, width // 2, width - margin - 10):
            page[y : y + 10, x : x + 10] = 0
    return page


def marks_left(gray):
    import cv2

    count, _ = cv2.connectedComponents((gray < 128).astype(np.uint8))
    return count - 1


@pytest.mark.parametrize("kind", ["skew", "perspective", "curl"])
def test_a_page_moved_by_a_scan_keeps_all_it_prints_in_the_picture(params, kind):
    """A crooked, photographed or bent A4 page keeps what is printed 6 mm from its edges, where
    a system's clef is on a page with narrow margins (benchmarks.pages' Verovio pages). Zoomed
    into the warped page instead, a photograph cut clefs off held-out pages, which were then
    read a few steps off in pitch."""
    marks = margin_marks((2970, 2100), round(2100 * 6 / 210))
    for seed in range(20):
        assert marks_left(scan_like(marks, VEROVIO_DPI, params.score_data.scan, seed, (kind,))) == 9
