"""Page-cut training systems: lines cut at the bars LilyPond broke at, headed as a page prints
them, and each stored image showing exactly its text (re-engraved alone and compared)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from music21 import corpus
from PIL import Image

from sonfolio.config.params import load_params
from sonfolio.score.common.canonical import bar_lengths, validate
from sonfolio.score.common.lilypond import Setting, find_lilypond
from sonfolio.score.common.page import split_page
from sonfolio.score.common.pages import Layout, LayoutUnproven, engrave, join_lines
from sonfolio.score.data.convert import systems_from_score
from sonfolio.score.data.dataset import WHOLE_PART, render_settings
from sonfolio.score.data.page_data import (
    PageJob,
    line_counts,
    lines,
    page_systems,
    take_apart,
    untied,
)
from sonfolio.score.data.parse import pieces_from_file
from sonfolio.score.data.render import finish

H = r"\clef treble \key c \major \time 3/4"
PIECE = (
    rf"{H} \partial 4 g'4 | c''2 \clef bass c4 | e2.~ | \key d \major \time 2/4 e4 fis4 | "
    r"\clef treble a'4 b'4~ | b'2"
)


def test_lines_are_headed_as_a_page_prints_them() -> None:
    validate(PIECE)
    out = lines(PIECE, [2, 1, 2, 1])
    assert [(x.text, x.time, x.bar) for x in out] == [
        (rf"{H} \partial 4 g'4 | c''2 \clef bass c4", None, 0),
        (r"\clef bass \key c \major e2.~", "3/4", 2),  # the tie is removed by `untied` first
        (r"\clef bass \key d \major \time 2/4 e4 fis4 | \clef treble a'4 b'4~", None, 3),
        (r"\clef treble \key d \major b'2", "2/4", 5),
    ]


def test_ties_across_line_breaks_are_removed_and_the_lines_validate() -> None:
    text, removed = untied(take_apart(PIECE), [2, 1, 2, 1])
    assert removed == 2 and text.count("~") == 0
    validate(text)
    for line in lines(text, [2, 1, 2, 1]):
        validate(line.text, line.time)


def test_a_part_joined_back_from_its_lines_is_the_text_engraved() -> None:
    text, _ = untied(take_apart(PIECE), [2, 1, 2, 1])
    for counts in ([2, 1, 2, 1], [1, 1, 1, 1, 1, 1], [3, 3], [6]):
        cut = lines(text, counts)
        assert join_lines([(x.text, x.time) for x in cut]) == text


def _bar(kind: str) -> str:
    return rf'\bar "{kind}"'


MARKED = (
    rf"{H} \partial 4 {_bar('.|:')} g'4 ( | c''2 -. \p d''4 ) {_bar(':..:')} | "
    rf"e''2. \fermata {_bar('.|:')} | \acciaccatura {{ g''8 }} f''4 ( e''4 d''4 {_bar(':|.')} | "
    rf"c''2. ) {_bar('|.')}"
)


def test_repeat_bar_lines_at_a_break_are_where_the_page_prints_them() -> None:
    validate(MARKED)
    text, removed = untied(take_apart(MARKED), [2, 1, 2])
    assert removed == 0 and text == MARKED  # both slurs lie within a line
    out = lines(text, [2, 1, 2])
    head = r"\clef treble \key c \major"
    assert [(x.text, x.time, x.bar) for x in out] == [
        # ":..:" at a break: an end repeat closes the line, a start repeat opens the next
        (rf"{H} \partial 4 {_bar('.|:')} g'4 ( | c''2 -. \p d''4 ) {_bar(':|.')}", None, 0),
        # ".|:" at a break: a plain bar line ends the line, the next one opens with the repeat
        (rf"{head} {_bar('.|:')} e''2. \fermata", "3/4", 2),
        (
            rf"{head} {_bar('.|:')} \acciaccatura {{ g''8 }} f''4 ( e''4 d''4 {_bar(':|.')} | "
            rf"c''2. ) {_bar('|.')}",
            "3/4",
            3,
        ),
    ]
    for line in out:
        validate(line.text, line.time)
    assert join_lines([(x.text, x.time) for x in out]) == text


def test_a_slur_across_a_line_break_is_removed_at_both_ends() -> None:
    text, removed = untied(take_apart(MARKED), [1, 2, 2])
    assert removed == 1
    assert "g'4 | c''2 -. \\p d''4 \\bar" in text  # the slur over bars 0-1 is gone
    assert "f''4 ( e''4" in text  # the one within the last line stays
    for line in lines(text, [1, 2, 2]):
        validate(line.text, line.time)


def test_line_counts_need_lines_that_fall_on_bar_lines() -> None:
    lengths = bar_lengths(PIECE)
    assert lengths == [Fraction(1, 4), Fraction(3, 4), Fraction(3, 4), Fraction(1, 2)] + [
        Fraction(1, 2),
        Fraction(1, 2),
    ]
    q = Fraction(1, 4)
    assert line_counts([(0, q + Fraction(3, 2)), (q + Fraction(3, 2), q + 3)], lengths) == [3, 3]
    with pytest.raises(LayoutUnproven, match="does not fall on bar lines"):
        line_counts([(0, Fraction(1, 2)), (Fraction(1, 2), q + 3)], lengths)


@pytest.fixture(scope="module")
def engraved(tmp_path_factory):
    """A Bach chorale's soprano and an O'Neill reel as pages at a large staff size (several
    lines each), cut and stored as the data stage stores them (clean: a test split's)."""
    params = load_params()
    cfg = params.score_data
    exe = find_lilypond()
    tmp = tmp_path_factory.mktemp("pages")
    out = []
    for name, part in (("bach/bwv66.6", 0), ("bach/bwv40.8", 1)):
        [(_, score)] = pieces_from_file(Path(corpus.getWork(name)))
        whole = systems_from_score(score, name, WHOLE_PART)[0][part]
        layout = Layout("a4", 26.0, "A chorale", "J. S. Bach")
        job = PageJob(name, whole.text, layout, tmp / "images", f"p{len(out)}", augment=False)
        result = page_systems(job, cfg.pages, exe, render_settings(cfg, exe), cfg.seed)
        assert not result.dropped, result.dropped
        out.append((job, result))
    return cfg, exe, tmp, out


def test_every_line_of_the_pages_is_stored_with_a_valid_text(engraved) -> None:
    _, _, _, out = engraved
    for job, result in out:
        assert len(result.lines) >= 2 and len(result.images) == len(result.lines)
        assert result.lines[0].time is None and result.lines[0].text.startswith(r"\clef")
        assert all(line.time == "4/4" and line.bar > 1 for line in result.lines[1:])
        for line in result.lines:
            validate(line.text, line.time)
        # the lines hold the whole part, bar for bar
        bars = sum(len(bar_lengths(x.text, x.time)) for x in result.lines)
        assert bars == len(bar_lengths(job.text))


def _profile(img: Image.Image) -> np.ndarray:
    """Ink per column of a line fitted to 640 px wide: bar lines, stems and note heads as peaks."""
    gray = np.asarray(img.convert("L").resize((640, max(1, round(img.height * 640 / img.width)))))
    return np.convolve((gray < 128).mean(axis=0), np.ones(5) / 5, mode="same")


def _similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The best correlation of two profiles over small stretches and shifts: a page's crop and
    a line engraved alone differ by a few pixels of margin (the bar number, the crop's pad)."""
    x = np.arange(len(a), dtype=float)
    best = -1.0
    for scale in np.linspace(0.95, 1.05, 11):
        for shift in range(-12, 13, 2):
            moved = np.interp(x * scale + shift, x, a, left=0.0, right=0.0)
            best = max(best, float(np.corrcoef(moved, b)[0, 1]))
    return best


def test_each_stored_line_shows_its_text_re_engraved_alone(engraved, tmp_path) -> None:
    """Alignment, checked on the pixels: each line's text is engraved again on its own (same
    paper and staff size, the page's indent only on a first line, as wide as a page's line,
    its bar number and time in force) and cut the same way; the stored image must look like its
    own text's engraving far more than like any other line's."""
    cfg, exe, _, out = engraved
    for job, result in out:
        stored = [_profile(Image.open(p)) for p in result.images]
        again = []
        for k, line in enumerate(result.lines):
            indent = None if k == 0 else 0.0  # LilyPond indents a piece's first line only
            layout = Layout(job.layout.paper, job.layout.staff_size, indent_mm=indent, justify=True)
            text = Setting(line.time, line.bar).prefix() + line.text
            length = sum(bar_lengths(line.text, line.time), Fraction(0))
            work = tmp_path / f"{job.stem}-{k}"
            [page] = engrave(text, length, layout, work, exe, cfg.pages.dpi, 60)
            gray = Image.open(page.png).convert("L")
            [box] = split_page(np.asarray(gray), cfg.pages.cut)
            crop = gray.crop((box.left, box.top, box.right, box.bottom))
            again.append(_profile(finish(crop, render_settings(cfg, exe), None)))
        for k, profile in enumerate(stored):
            own = _similarity(profile, again[k])
            others = [_similarity(profile, a) for j, a in enumerate(again) if j != k]
            # measured: 0.85-1.00 for its own text, 0.40-0.64 for another line's (a line
            # engraved alone is spaced a little differently: LilyPond spaces a score by its
            # shortest note)
            assert own > 0.8, (job.piece, k, own)
            assert own > max(others) + 0.15, (job.piece, k, own, others)


@pytest.fixture(scope="module")
def verovio_engraved(tmp_path_factory):
    """The same parts laid out on pages by Verovio (Bravura, Petaluma), cut and stored."""
    params = load_params()
    cfg = params.score_data
    exe = find_lilypond()
    tmp = tmp_path_factory.mktemp("verovio-pages")
    out = []
    for name, part, font in (("bach/bwv66.6", 0, "Bravura"), ("bach/bwv40.8", 1, "Petaluma")):
        [(_, score)] = pieces_from_file(Path(corpus.getWork(name)))
        whole = systems_from_score(score, name, WHOLE_PART)[0][part]
        job = PageJob(name, whole.text, Layout("a4", 20.0), tmp / "images", f"v{len(out)}",
                      augment=False, engraver=f"verovio:{font}")  # fmt: skip
        result = page_systems(job, cfg.pages, exe, render_settings(cfg, exe), cfg.seed)
        assert not result.dropped, result.dropped
        out.append((job, result))
    return cfg, out


def test_verovio_pages_are_stored_line_by_line_with_valid_texts(verovio_engraved) -> None:
    _, out = verovio_engraved
    for job, result in out:
        assert len(result.lines) >= 2 and len(result.images) == len(result.lines)
        for line in result.lines:
            validate(line.text, line.time)
        bars = sum(len(bar_lengths(x.text, x.time)) for x in result.lines)
        assert bars == len(bar_lengths(job.text))


def test_a_verovio_page_whose_cut_misses_a_staff_is_dropped(verovio_engraved, tmp_path):
    """The cut's boxes must hold the staff rows Verovio's SVG reports, line by line: a line
    whose rows lie outside its box (as a wrong cut would leave them) drops the page, counted.
    A stored line image stands for a page of one line here."""
    from sonfolio.score.data.page_data import PageResult, _cut_pages

    cfg, out = verovio_engraved
    job, result = out[0]
    gray = Image.open(result.images[0]).convert("L")
    [box] = split_page(np.asarray(gray), cfg.pages.cut)
    settings = render_settings(cfg, find_lilypond())
    moved = replace(job, dest=tmp_path)

    def cut(rows):
        page = _cut_pages(moved, cfg.pages, settings, cfg.seed, PageResult(),
                          result.lines[:1], [gray], [1], [rows])  # fmt: skip
        return len(page.lines), page.dropped["page_cut_mismatch"]

    assert cut([(box.top + 2.0, box.bottom - 2.0)]) == (1, 0)
    assert cut([(box.bottom + 5.0, box.bottom + 40.0)]) == (0, 1)
