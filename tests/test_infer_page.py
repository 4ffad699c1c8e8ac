"""A page image is cut into its staff systems (sonfolio.score.common.page), on real LilyPond
engravings."""

from __future__ import annotations

import numpy as np
import pytest
from infer_tiny import SYSTEMS, render_systems, stack
from PIL import Image

from sonfolio.score.common.page import deskew, find_staves, group_staves, split_page


@pytest.fixture(scope="module")
def systems():
    return render_systems(SYSTEMS)


def test_a_page_of_three_systems_is_cut_into_three_boxes_around_them(systems, params):
    page, spans = stack(systems)
    boxes = split_page(np.asarray(page), params.infer.page)
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
    whole_width = params.infer.page.model_copy(update={"strips": 1})
    assert len(find_staves(np.asarray(tilted), whole_width)) < 3  # long lines break up
    assert len(find_staves(np.asarray(tilted), params.infer.page)) == 3  # strips hold them
    level, angle = deskew(tilted, params.infer.page.max_skew_deg, params.infer.image)
    assert angle == pytest.approx(-tilt, abs=0.15)
    assert len(split_page(np.asarray(level), params.infer.page)) == 3


def test_a_level_page_is_left_as_it_is(systems, params):
    page, _ = stack(systems)
    assert deskew(page, params.infer.page.max_skew_deg, params.infer.image) == (page, 0.0)


def test_a_single_system_has_one_staff(systems, params):
    for img in systems:
        assert len(find_staves(np.asarray(img), params.infer.page)) == 1


def test_a_title_above_the_first_system_is_left_out(systems, params):
    page, spans = stack(systems, margin=120)
    page.paste(0, (40, 10, 400, 40))  # a black title bar far above the first staff
    boxes = split_page(np.asarray(page), params.infer.page)
    assert len(boxes) == 3
    assert boxes[0].top > 40


def test_a_scans_edge_line_through_a_staff_does_not_stretch_its_box(systems, params):
    """A page edge, fold or curl shadow that runs through the last staff down to the page's
    foot (as scan-like pages show) is cut at a reach from the staff, not kept whole: the box
    holds its system, not a sliver of it above a page of paper."""
    page, spans = stack(systems, margin=600)
    x = 600 + systems[-1].width - 40  # through the last staff's lines, near its end
    page.paste(0, (x, spans[-1][0], x + 2, page.height))  # a line from the last staff down
    boxes = split_page(np.asarray(page), params.infer.page)
    assert len(boxes) == 3
    top, bottom = spans[-1]
    assert boxes[-1].bottom < bottom + 2 * (bottom - top)  # not the page's foot (600 px below)
    assert boxes[-1].top <= top + 3
    # one that starts under the staff, near its ink but not crossing its lines (taken with
    # the staff as a ledger line would be), is cut so too
    page, spans = stack(systems, margin=600)
    staff_top, staff_bottom = find_staves(np.asarray(page), params.infer.page)[-1]
    below = staff_bottom + round(0.8 * (staff_bottom - staff_top) / 4)  # 0.8 space under it
    page.paste(0, (x, below, x + 2, page.height))
    boxes = split_page(np.asarray(page), params.infer.page)
    assert len(boxes) == 3 and boxes[-1].bottom < bottom + 2 * (bottom - top)


def test_a_blank_page_has_no_systems(params):
    assert split_page(np.full((200, 300), 255, np.uint8), params.infer.page) == []


def test_a_stray_line_before_a_staff_does_not_hide_it():
    lines = [(0, 0)] + [(20 + 8 * i, 21 + 8 * i) for i in range(5)]  # a bracket, then a staff
    assert group_staves(lines, 4) == [(20, 53)]


def test_too_few_evenly_spaced_lines_are_not_a_staff():
    assert group_staves([(10, 10), (18, 18), (26, 26)], 4) == []
