"""A page image is cut into its staff systems (sonfolio.score.common.page), on real LilyPond
engravings."""

from __future__ import annotations

import numpy as np
import pytest
from infer_tiny import SYSTEMS, render_systems, stack
from PIL import Image

from sonfolio.score.common.page import cut_page, deskew, find_staves, group_staves, split_page


@pytest.fixture(scope="module")
def systems():
    return render_systems(SYSTEMS)


def test_a_page_of_three_systems_is_cut_into_three_boxes_around_them(systems, params):
    page, spans = stack(systems)
    boxes = split_page(np.asarray(page), params.infer.score.page)
    assert len(boxes) == 3
    for box, (top, bottom), img in zip(boxes, spans, systems, strict=True):
        # each box holds its whole system and nothing of the next one
        assert top - 3 <= box.top <= top + img.height // 2
        assert bottom - img.height // 2 <= box.bottom <= bottom + 3
        assert box.right - box.left >= 0.9 * img.width


@pytest.mark.parametrize("tilt", [2.0, -1.5])
def test_a_tilted_page_is_straightened_then_cut_into_three(systems, params, tilt):
    page, _ = stack(systems)
    tilted = page.rotate(tilt, Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    whole_width = params.infer.score.page.model_copy(update={"strips": 1})
    assert len(find_staves(np.asarray(tilted), whole_width)) < 3  # long lines break up
    assert len(find_staves(np.asarray(tilted), params.infer.score.page)) == 3  # strips hold them
    level, angle = deskew(tilted, params.infer.score.page.max_skew_deg, params.infer.score.image)
    assert angle == pytest.approx(-tilt, abs=0.15)
    assert len(split_page(np.asarray(level), params.infer.score.page)) == 3


def test_a_level_page_is_left_as_it_is(systems, params):
    page, _ = stack(systems)
    assert deskew(page, params.infer.score.page.max_skew_deg, params.infer.score.image) == (
        page,
        0.0,
    )


def test_a_single_system_has_one_staff(systems, params):
    for img in systems:
        assert len(find_staves(np.asarray(img), params.infer.score.page)) == 1


def test_a_title_above_the_first_system_is_left_out(systems, params):
    page, spans = stack(systems, margin=120)
    page.paste(0, (40, 10, 400, 40))  # a black title bar far above the first staff
    boxes = split_page(np.asarray(page), params.infer.score.page)
    assert len(boxes) == 3
    assert boxes[0].top > 40


def test_a_scans_edge_line_through_a_staff_does_not_stretch_its_box(systems, params):
    """A page edge, fold or curl shadow that runs through the last staff down to the page's
    foot (as scan-like pages show) is cut at a reach from the staff, not kept whole: the box
    holds its system, not a sliver of it above a page of paper."""
    page, spans = stack(systems, margin=600)
    x = 600 + systems[-1].width - 40  # through the last staff's lines, near its end
    page.paste(0, (x, spans[-1][0], x + 2, page.height))  # a line from the last staff down
    boxes = split_page(np.asarray(page), params.infer.score.page)
    assert len(boxes) == 3
    top, bottom = spans[-1]
    assert boxes[-1].bottom < bottom + 2 * (bottom - top)  # not the page's foot (600 px below)
    assert boxes[-1].top <= top + 3
    # one that starts under the staff, near its ink but not crossing its lines (taken with
    # the staff as a ledger line would be), is cut so too
    page, spans = stack(systems, margin=600)
    staff_top, staff_bottom = find_staves(np.asarray(page), params.infer.score.page)[-1]
    below = staff_bottom + round(0.8 * (staff_bottom - staff_top) / 4)  # 0.8 space under it
    page.paste(0, (x, below, x + 2, page.height))
    boxes = split_page(np.asarray(page), params.infer.score.page)
    assert len(boxes) == 3 and boxes[-1].bottom < bottom + 2 * (bottom - top)


def test_a_blank_page_has_no_systems(params):
    assert split_page(np.full((200, 300), 255, np.uint8), params.infer.score.page) == []


def test_a_stray_line_before_a_staff_does_not_hide_it():
    lines = [(0, 0)] + [(20 + 8 * i, 21 + 8 * i) for i in range(5)]  # a bracket, then a staff
    assert group_staves(lines, 4) == [(20, 53)]


def test_too_few_evenly_spaced_lines_are_not_a_staff():
    assert group_staves([(10, 10), (18, 18), (26, 26)], 4) == []


def _two_staves_and_a_mark() -> tuple[np.ndarray, tuple[int, int]]:
    """A drawn page: two staves (5 lines, 10 px apart, 400 px long), a stem 30 px up from the
    first staff's top line at its left end (its box reaches that high), and a mark 25 px
    above the first staff in the middle, far (2.5 spaces) from the staff's ink in its columns:
    it goes with no staff, yet lies within the first staff's box. Returns the page and the
    mark's centre."""
    page = np.full((300, 500), 255, np.uint8)
    for top in (60, 180):
        for k in range(5):
            page[top + 10 * k : top + 10 * k + 2, 50:450] = 0
    page[30:62, 60:62] = 0  # the stem
    page[33:37, 240:252] = 0  # the mark: rows 33-36, 4 rows above the stem's top at 30
    return page, (35, 246)


@pytest.mark.parametrize("own_ink_only", [True, False])
def test_a_systems_image_keeps_only_its_own_staffs_ink(params, own_ink_only):
    """infer.score.page.own_ink_only: ink in a system's box that went with no staff (a title, a
    scan's bleed-through) is painted over in the paper's grey; off, the image is the box."""
    page, (y, x) = _two_staves_and_a_mark()
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": own_ink_only})
    [(box, image), (_, second)] = cut_page(page, cfg)
    assert box.top <= 30 < y < box.bottom and box.left <= x < box.right  # the mark is inside
    mark = image[y - box.top - 2 : y - box.top + 2, x - box.left - 6 : x - box.left + 6]
    assert (mark == 255).all() if own_ink_only else (mark == 0).all()
    # the staff's own ink is kept whole: its lines, and the stem that set the box's top
    assert (image[60 - box.top, 50 - box.left : 450 - box.left] == 0).all()
    assert (image[31 - box.top, 60 - box.left] == 0) and second.min() == 0


def _staff(page: np.ndarray, top: int) -> None:
    for k in range(5):  # 5 lines, 10 px apart (a space of 10 px), 400 px long
        page[top + 10 * k : top + 10 * k + 2, 50:450] = 0


@pytest.mark.parametrize("own_ink_only", [True, False])
def test_a_title_word_near_the_high_notes_is_left_out_with_its_line(params, own_ink_only):
    """A title LilyPond set close over the first line's notes: one word lies within reach of
    a stem (taken with the staff, link by link), the other not. With own_ink_only the word is
    known by the line it shares with the one left out (tops aligned, 2 spaces apart) and is
    left out too, so the first system's box starts at the stem; without, it reaches the title."""
    page = np.full((300, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 180)
    page[30:62, 205:207] = 0  # a stem from the staff up to row 30
    page[14:24, 160:200] = 0  # a title word 0.7 space above the stem's top
    page[14:24, 100:140] = 0  # the title's other word, 20 px (2 spaces) to its left
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": own_ink_only})
    first = split_page(page, cfg)[0]
    if own_ink_only:
        assert 28 <= first.top <= 30
    else:
        assert first.top <= 14


@pytest.mark.parametrize("own_ink_only", [True, False])
def test_ink_far_from_both_staves_between_them_goes_with_none_when_own_ink_only(
    params, own_ink_only
):
    """A speck of a scan's bleed-through halfway between two staves, far from either's ink:
    by default the nearer staff's box takes it in (lyrics there belong to a line); with
    own_ink_only it goes with no staff, and no box reaches it."""
    page = np.full((360, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 260)
    page[150:156, 240:248] = 0  # 5 spaces under the first staff, 10 over the second
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": own_ink_only})
    first, second = split_page(page, cfg)
    assert (first.bottom >= 156) is not own_ink_only
    assert second.top > 156


@pytest.mark.parametrize("own_ink_only", [True, False])
def test_ink_beside_a_short_last_line_is_not_its_when_own_ink_only(params, own_ink_only):
    """Verovio leaves a last line short; a scan's bleed-through beside it, in its rows, once
    stretched its image to the page's width (its music read a third as large). With
    own_ink_only the line's box ends at its lines, its notes kept, and a ghost stroke from
    beside it up to the staff above goes with neither; without, the boxes take the ghosts in,
    as the data stage cuts its train pages. Lines worn through in all five at once for 2
    spaces still hold the staff's columns past the break."""
    page = np.full((360, 500), 255, np.uint8)
    _staff(page, 60)  # lines 50-450
    for k in range(5):  # the short last line: 15 spaces, 50-200, worn through 120-140
        page[200 + 10 * k : 202 + 10 * k, 50:200] = 0
        page[200 + 10 * k : 202 + 10 * k, 120:140] = 255
    page[196:246, 197:200] = 0  # its final bar line
    page[224:232, 180:190] = 0  # a note just before it, past the worn part
    page[212:218, 330:338] = 0  # a ghost in its rows, 13 spaces beside it
    page[220:222, 250:310] = 0  # the back's staff line showing through, 6 spaces long
    page[108:215, 400:402] = 0  # a ghost stroke from under the staff above into those rows
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": own_ink_only})
    (first, _), (second, image) = cut_page(page, cfg)
    if own_ink_only:
        assert 200 <= second.right <= 215 and first.bottom < 108
        assert image[228 - second.top, 185 - second.left] == 0  # the note is kept
    else:
        assert second.right >= 402


def test_bleed_through_taken_link_by_link_under_the_last_staff_is_cut_at_its_reach(params):
    """A scan's bleed-through under the last staff: ghost specks each within a space of the
    one above, from a note's reach of the lines down to 7.5 spaces under them, are taken link
    by link. infer.score.page.reach_spaces (6) cuts them there, so the box holds the system,
    not a tall image that the reading shrinks; the note next to the staff is kept."""
    page = np.full((360, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 180)  # its bottom line: rows 220-221
    for top in (226, 242, 258, 274, 290):  # 8 px specks 8 px (0.8 space) apart: 226-297
        page[top : top + 8, 300:308] = 0
    cfg = params.infer.score.page
    assert cfg.reach_spaces == 6
    [_, (box, image)] = cut_page(page, cfg)
    assert 229 <= box.bottom <= 221 + 6 * 10 + 3  # within 6 spaces (and the padding)
    assert (image[226 - box.top : 234 - box.top, 300 - box.left : 308 - box.left] == 0).all()
    [_, (wide, _)] = cut_page(page, cfg.model_copy(update={"reach_spaces": 10}))
    assert wide.bottom >= 297  # the old reach took the whole chain


def test_whole_notes_on_five_ledger_lines_are_kept_whole_within_the_reach(params):
    """A LilyPond system whose whole notes stand on the fifth ledger line over the staff and
    under it (B6 and B2 in the treble clef; no stem joins them to the staff, so they are taken
    ledger line by ledger line) is boxed whole on a page by the default reach: none of its ink
    is cut off. (Stemmed notes on six ledger lines: tests/test_infer_page_layouts.py.)"""
    high_low = r"\clef treble \key c \major \time 4/4 b'''1 | b,1 | g'4 a'4 b'4 c''4 | d''1"
    images = render_systems([SYSTEMS[0], high_low, SYSTEMS[2]])
    page, spans = stack(images, gap=40)
    boxes = split_page(np.asarray(page), params.infer.score.page)
    assert len(boxes) == 3
    ink = np.asarray(images[1]) < 128
    lines = np.nonzero(ink.sum(axis=1) > ink.shape[1] // 2)[0]  # the staff's five lines' rows
    space = (lines.max() - lines.min()) / 4
    rows = np.nonzero(ink.any(axis=1))[0]
    assert rows.min() < lines.min() - 5 * space and rows.max() > lines.max() + 5 * space
    top, bottom = spans[1][0] + int(rows.min()), spans[1][0] + int(rows.max())
    assert boxes[1].top <= top and boxes[1].bottom >= bottom


def test_over_the_first_staff_a_ledger_line_leads_on_a_title_word_does_not(params):
    """own_ink_only: a whole note on the third ledger line over the first staff is taken, line
    by line (each ledger line 1 space over the last); a title whose one word lies within reach
    of a stem, the other word 0.8 space beside it, is not taken word by word: both are left
    out, and the box starts at the note's top."""
    page = np.full((300, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 180)
    for row in (50, 40, 30):  # three ledger lines, 16 px wide
        page[row : row + 2, 300:316] = 0
    page[26:36, 302:314] = 0  # the whole note on the third one (one piece with it)
    page[30:62, 205:207] = 0  # a stem up to row 30
    page[14:24, 160:200] = 0  # a title word 0.7 space over the stem
    page[14:24, 100:152] = 0  # and the word before it, 8 px away: within a space of its columns
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": True})
    [(first, image), _] = cut_page(page, cfg)
    assert 24 <= first.top <= 26  # the note's top (2 px of paper over it), no title
    assert (image[30 - first.top, 302 - first.left : 314 - first.left] == 0).all()


def test_a_one_word_title_over_the_high_notes_is_told_by_its_size(params):
    """own_ink_only: a title of one word, 2.5 spaces tall and solid, 0.7 space over a stem
    (within reach of it, and no other word on its line to tell it by) is left out; a slur as
    wide and as far over the notes (thin: little ink in its box) is kept."""
    page = np.full((300, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 180)
    page[40:62, 205:207] = 0  # a stem from the staff up to row 40
    page[8:33, 180:260] = 0  # the word: rows 8-32, 7 px over the stem's top
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": True})
    [(first, image), _] = cut_page(page, cfg)
    assert 38 <= first.top <= 40
    page[8:33, 180:260] = 255
    page[8:10, 180:260] = page[8:33, 180:182] = page[8:33, 258:260] = 0  # a bracket-like slur
    [(first, _), _] = cut_page(page, cfg)
    assert first.top <= 8


@pytest.mark.parametrize("own_ink_only", [True, False])
def test_a_title_word_joined_to_a_stem_is_left_out_letter_by_letter(params, own_ink_only):
    """A title word LilyPond set within JOIN_DOWN of a stem is one piece with the staff's ink.
    With own_ink_only its letters (strokes as tall as a title's small letters, on the line of
    the word left out beside it) are told apart from the stem, which runs down out of the
    line: the first system's box starts at the stem's top, and the stem is kept whole."""
    page = np.full((300, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 180)
    page[32:62, 205:207] = 0  # a stem from the staff up to row 32
    page[4:30, 100:140] = 0  # the title's first word (2.6 spaces tall), far from the notes
    for left in (160, 174, 188, 202):  # the next word's small letters (1.4 spaces), 4 px
        page[16:30, left : left + 10] = 0  # apart: the last 2 px over the stem (JOIN_DOWN 4.5)
    page[11:14, 192:196] = 0  # an "i"'s dot over its letter
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": own_ink_only})
    [(first, image), _] = cut_page(page, cfg)
    if own_ink_only:
        assert 30 <= first.top <= 32
        assert (image[32 - first.top : 62 - first.top, 205 - first.left] == 0).all()
    else:
        assert first.top <= 11
    # a whole note on its fourth ledger line at the title's height, 1.4 spaces past its last
    # letter: a notehead (1.1 spaces with its line) is shorter than a letter, and is kept
    for row in (50, 40, 30, 20):
        page[row : row + 2, 226:242] = 0
    page[16:27, 228:240] = 0
    [(first, image), _] = cut_page(page, cfg)
    note = image[21 - first.top, 228 - first.left : 240 - first.left]
    assert first.top <= 16 and (note == 0).all()


def test_a_scans_ghost_over_the_first_staff_is_no_title_line(params):
    """own_ink_only: what is left out over the first staff tells a title line only when it is
    word-sized: a thin ghost stem of bleed-through beside a note over the staff (on a ledger
    line, its stem up, 3.6 spaces of ink apart from the lines) leaves the note whole."""
    page = np.full((300, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 180)
    page[50:52, 300:318] = 0  # a ledger line
    page[46:56, 304:316] = 0  # the note on it
    page[20:50, 314:316] = 0  # its stem, up
    page[16:47, 336:338] = 0  # the ghost: 2 spaces from the stem, too far over the lines
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": True})
    [(first, image), _] = cut_page(page, cfg)
    assert first.top <= 20 and (image[20 - first.top : 50 - first.top, 314 - first.left] == 0).all()
    assert (image[16 - first.top : 47 - first.top, 336 - first.left] == 255).all()  # painted


def test_a_broken_slurs_piece_beside_a_title_word_is_kept(params):
    """own_ink_only: a piece of a slur a scan broke, as dense and tall as a letter, over a
    note beside the title word joined to a stem, stays with the staff: its foot is not on the
    title line's baseline."""
    page = np.full((300, 500), 255, np.uint8)
    _staff(page, 60)
    _staff(page, 180)
    page[32:62, 205:207] = 0  # the stem the title word is joined to
    page[4:30, 100:140] = 0  # the title's first word, left out
    for left in (160, 174, 188, 202):  # the joined word's letters, foot on row 29
        page[16:30, left : left + 10] = 0
    page[32:62, 228:230] = 0  # a second note's stem, up to row 32
    page[10:25, 226:232] = 0  # the slur's piece over it: foot on row 24, half a space up
    cfg = params.infer.score.page.model_copy(update={"own_ink_only": True})
    [(first, image), _] = cut_page(page, cfg)
    assert 8 <= first.top <= 10
    top, left = first.top, first.left
    assert (image[10 - top : 25 - top, 226 - left : 232 - left] == 0).all()  # the slur's
    assert (image[16 - top : 30 - top, 160 - left : 170 - left] == 255).all()  # a letter


def test_each_system_of_a_page_is_straightened_on_its_own(systems, params):
    """A photo's perspective tilts one page's lines by different angles: no turn of the whole
    page levels them all, so each system cut is straightened again (infer.score.system_skew_deg);
    0 leaves them as cut (the control)."""
    from sonfolio.score.common.page import ink_mask, skew_deg
    from sonfolio.score.decode.read import system_images

    tilts = (2.0, 0.0, -2.0)
    turned = [
        img.rotate(t, Image.Resampling.BICUBIC, expand=True, fillcolor=255) if t else img
        for img, t in zip(systems, tilts, strict=True)
    ]
    page, _ = stack(turned)

    def tilts_left(cfg):
        _, crops, angle = system_images(page, True, cfg)
        assert angle == 0.0 and len(crops) == 3  # the page as a whole is level
        return [skew_deg(ink_mask(np.asarray(c)), 5.0) for c in crops], crops

    left, crops = tilts_left(params.infer)
    assert left == [pytest.approx(0.0, abs=0.15)] * 3
    assert crops[0].height < turned[0].height  # cut back to its ink, level
    for update in ({"system_skew_deg": 0.0}, {"system_skew_min_deg": 2.5}):
        score = params.infer.score.model_copy(update=update)
        off, _ = tilts_left(params.infer.model_copy(update={"score": score}))
        assert off[0] == pytest.approx(-2.0, abs=0.15) and off[2] == pytest.approx(2.0, abs=0.15)
        assert off[1] == left[1] == 0.0


def test_a_system_skew_floor_above_its_range_is_refused_by_name(params):
    from pydantic import ValidationError

    from sonfolio.config.infer import Infer

    raw = params.infer.model_dump()
    score = raw["score"]
    with pytest.raises(ValidationError, match="system_skew_min_deg 4.0 is above system_skew_deg"):
        Infer.model_validate({**raw, "score": {**score, "system_skew_min_deg": 4.0}})
    off = {**score, "system_skew_min_deg": 4.0, "system_skew_deg": 0.0}
    Infer.model_validate({**raw, "score": off})
