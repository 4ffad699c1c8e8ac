"""A page image -> one box per staff system, top to bottom.

The score model reads one single-staff system at a time, so a page is cut first: staff lines are
found as rows holding a long horizontal run of ink, evenly spaced lines are grouped into staves
(one odd line among them, a long beam, skipped). The ink is then labelled into pieces (ink
closer than half a staff space joined: a note and its fingering, the letters of a word), and
each piece goes with a staff: the one whose lines it crosses; else, taken in rounds, the staff
whose ink lies within ATTACH spaces in the piece's columns, so that ledger-line stacks and
text over the notes follow their staff link by link; what is left between two staves goes with
the nearer. Above the first staff and below the last, pieces near nothing (a title, a page
number, a footer) and header text aligned to the margins (a composer, a poet) go with none.
A box is the ink of its staff's pieces. With `own_ink_only`, ownership is strict (a staff
crosses only the columns of its lines, so ink beside a short last line in its rows is not
its; what is left between two staves goes with none; the words of a title that the first
staff took in over its high notes go with none, told by their size or by their line's other
words; over the first staff only a ledger line leads on to the next piece: ink.owners), and
the system's image is its box with every other ink pixel (a title, the next staff's low
notes, a scan's bleed-through) painted over in the paper's grey.

Written here with numpy because no installed library does it: the environment has no OpenCV,
scikit-image or scipy, and the open-source OMR tools that segment staves (e.g. oemer, homr)
bring their own neural models. A staff line tilted by more than a fraction of a degree is
broken into short runs, so a page is first straightened: the tilt (within `max_skew_deg`) that
makes the ink's row profile sharpest is undone; the turned page is held to the same pixel
limit as the upload (infer.score.image), checked before it is made.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from sonfolio.limits import check_image_size
from sonfolio.score.common.ink import Piece, ink_pieces, owners, runs, shift_or, span

if TYPE_CHECKING:
    from sonfolio.config.infer import ImageLimits
    from sonfolio.config.page import PageSplit

log = logging.getLogger(__name__)

# A pixel is ink when it is at least this share of the way from the paper's grey (the median
# pixel: most of a page is paper) to the ink's (`ink_mask`). A quarter keeps the
# anti-aliased grey rows of a thin staff line, which a 50% cut can drop.
INK_SHARE = 0.25
LINE_SPACING_TOLERANCE = 0.3  # a staff's line gaps may differ this much from their mean
PAD = 2  # px of paper kept around each system's ink, as LilyPond's tight crop leaves some
SKEW_STEP_DEG = 0.1  # tilts tried: every 0.1 degree (a 2,000 px line drifts 3.5 px per step)
SKEW_SAMPLE = 200_000  # ink pixels enough to score a tilt; more are subsampled
MIN_CONTRAST = 32  # grey levels below the paper's that are clearly ink, not paper noise
MIN_INK_SHARE = 1e-4  # of the pixels: less dark is dust (one system at 100 dpi has 1%)
# px around ink painted over (own_ink_only) that are painted too: its anti-aliased edge, lighter
# than ink_mask's cut, would otherwise stay as a faint outline
HALO = 1
# A staff line found with its gaps bridged (page_staves) is at most this thick (staff spaces):
# a printed line is 0.1-0.2 of a space, a thresholded 100-dpi one 2-3 px of a 7 px space; a
# title's bold letters, bridged, make a bar 2-3 spaces tall
BRIDGED_LINE_SPACES = 0.6
# ... and its lines are spaced as the staves found before within this share (not the 0.3 of
# LINE_SPACING_TOLERANCE): bridged, the serifs and bars of a title in capitals make thin rows
# about as far apart as staff lines (7.8 px against a 10.4 px staff on a train page)
BRIDGED_SPACE_TOLERANCE = 0.1
# With `own_ink_only`, a staff reaches across the columns of the runs of ink in its rows at least
# STAFF_RUN_SPACES staff spaces long (its lines; gaps up to line_gap_spaces bridged), those
# that follow on from its longest one with less than STAFF_GAP_SPACES between them, and
# STAFF_END_SPACES beyond them either side (`staff_columns`): ink in its rows past that (a
# scan's bleed-through beside a short last line, the back's staff lines among it, which
# stretched the line's image to the page's width) is not its. A note on the staff lies over
# its lines; a bracket or a repeat's dots lie within a space of their ends; a staff's lines
# broken by a worn print leave no gap of 3 spaces in all five at once.
STAFF_RUN_SPACES = 4.0
STAFF_GAP_SPACES = 3.0
STAFF_END_SPACES = 1.0


@dataclass(frozen=True)
class Box:
    """A rectangle of the image, in pixels: right and bottom excluded."""

    left: int
    top: int
    right: int
    bottom: int

    def as_list(self) -> list[int]:
        return [self.left, self.top, self.right, self.bottom]


def ink_mask(gray: np.ndarray) -> np.ndarray:
    """(H, W) uint8 grey, paper light -> (H, W) bool, True where ink."""
    paper = float(np.median(gray))
    dark = gray[gray < paper - MIN_CONTRAST]
    # No contrast (a blank or uniformly dark image) or a few specks of dust: no ink.
    if dark.size <= MIN_INK_SHARE * gray.size:
        return np.zeros(gray.shape, dtype=bool)
    # The ink's grey from the clearly dark pixels only: a percentile of the whole page is paper
    # on a sparse page (one system: under 1% of the pixels are ink).
    ink = float(np.percentile(dark, 5))
    return gray < paper - INK_SHARE * (paper - ink)


def longest_runs(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool -> (H,) the longest run of consecutive True in each row."""
    rows, starts, ends = runs(mask)
    out = np.zeros(mask.shape[0], dtype=np.int64)
    np.maximum.at(out, rows, ends - starts)
    return out


def staff_lines(
    mask: np.ndarray, fraction: float, at_least: float | None = None
) -> list[tuple[int, int]]:
    """Rows (first, last) of each horizontal line: a run of rows whose longest ink run is at
    least `fraction` of the longest one on the page (a staff line runs through the notes on it,
    so it is the longest run there is; text and ledger lines are far shorter, a long beam or
    slur may pass and is told apart by the spacing, `group_staves`), or `at_least` px."""
    longest = longest_runs(mask)
    if longest.max(initial=0) == 0:
        return []
    limit = fraction * longest.max() if at_least is None else at_least
    rows = np.flatnonzero(longest >= limit)
    breaks = np.flatnonzero(np.diff(rows) > 1)
    firsts = np.concatenate([rows[:1], rows[breaks + 1]])
    lasts = np.concatenate([rows[breaks], rows[-1:]])
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


@dataclass(frozen=True)
class Staff:
    """A staff's rows, top line's first to bottom line's last, and its line spacing (px)."""

    top: int
    bottom: int
    space: float


def _centre(line: tuple[int, int]) -> float:
    return (line[0] + line[1]) / 2


def _chain(lines: list[tuple[int, int]], first: int, second: int) -> list[int]:
    """Indices of the lines that continue `first`, `second` at the same spacing (each within
    LINE_SPACING_TOLERANCE of the mean gap so far); one line among them (a long beam, a slur)
    is skipped."""
    chain = [first, second]
    spacing = _centre(lines[second]) - _centre(lines[first])
    for k in range(second + 1, len(lines)):
        gap = _centre(lines[k]) - _centre(lines[chain[-1]])
        if gap > (1 + LINE_SPACING_TOLERANCE) * spacing or k - first - len(chain) + 1 > 1:
            break  # too far, or a second line skipped (a staff rarely holds two beams that long)
        if abs(gap - spacing) <= LINE_SPACING_TOLERANCE * spacing:
            chain.append(k)
            spacing = (_centre(lines[k]) - _centre(lines[first])) / (len(chain) - 1)
    return chain


def find_staff_spans(lines: list[tuple[int, int]], min_lines: int) -> list[Staff]:
    """Evenly spaced lines -> staves, top to bottom. From each line not yet in a staff, the
    longest chain of evenly spaced lines that starts there (with any of the next few lines as
    its second) is a staff when it has `min_lines`; a line that fits no staff (a bracket, a
    long beam or slur, even between a staff's lines) is left out."""
    staves: list[Staff] = []
    i = 0
    while i < len(lines) - 1:
        chains = [_chain(lines, i, j) for j in range(i + 1, min(i + 4, len(lines)))]
        best = max(chains, key=len)
        if len(best) < min_lines:
            i += 1
            continue
        first, last = lines[best[0]], lines[best[-1]]
        staves.append(Staff(first[0], last[1], (_centre(last) - _centre(first)) / (len(best) - 1)))
        i = best[-1] + 1
    return staves


def page_staves(mask: np.ndarray, cfg: PageSplit) -> list[Staff]:
    """The staves of a page's ink, top to bottom, short, bent and broken ones included.

    First the staves whose lines run at least `cfg.staff_line_fraction` of the page's longest
    ink run (the full-width ones). Then, in each of `cfg.strips` vertical strips, the same
    within the strip: a photographed or curled page bends its staff lines, so that no row
    holds a long run of one, while a strip's width holds a nearly straight piece of it. And a
    staff left short: lines at least `cfg.short_staff_spaces` staff spaces long (an engraver
    that leaves its last system at its natural width, as Verovio does, draws lines a fifth of
    the page's width; an indented or coda staff is short too). Staves found more than once
    (overlapping rows) are one staff, spanning all their rows; only staves of the spacing most
    found are kept (within LINE_SPACING_TOLERANCE).

    Then all of it once more with the gaps in each row up to `cfg.line_gap_spaces` staff
    spaces bridged, for a staff whose lines a thresholded low-dpi scan or a worn print broke
    into dashes, none of them long: a staff found so is added where none was found, of lines
    at most BRIDGED_LINE_SPACES thick (bridged, a title's letters make a bar as tall as they
    are), spaced as the others within BRIDGED_SPACE_TOLERANCE. A staff found before is left
    as it was.
    """
    found = _long_line_staves(mask, cfg)
    if not found:
        return []
    space = float(np.median([s.space for s in found]))
    staves = _merged(found + _short_staves(mask, cfg, space), space)
    if cfg.line_gap_spaces > 0:
        bridged = shift_or(mask, max(1, round(cfg.line_gap_spaces * space)), axis=1)
        thin = round(BRIDGED_LINE_SPACES * space)
        more = _long_line_staves(bridged, cfg, thin) + _short_staves(bridged, cfg, space, thin)
        more = [s for s in more if abs(s.space - space) <= BRIDGED_SPACE_TOLERANCE * space]
        new = [
            s
            for s in _merged(more, space)
            if not any(s.top <= t.bottom and t.top <= s.bottom for t in staves)
        ]
        staves = sorted(staves + new, key=lambda s: s.top)
    return staves


def _merged(found: list[Staff], space: float) -> list[Staff]:
    """Staves of about `space` (within LINE_SPACING_TOLERANCE), top to bottom, those whose
    rows overlap made one."""
    alike = [s for s in found if abs(s.space - space) <= LINE_SPACING_TOLERANCE * space]
    staves: list[Staff] = []
    for s in sorted(alike, key=lambda s: s.top):
        if staves and s.top <= staves[-1].bottom:
            last = staves[-1]
            staves[-1] = Staff(last.top, max(last.bottom, s.bottom), last.space)
        else:
            staves.append(s)
    return staves


def _thin(lines: list[tuple[int, int]], rows: int | None) -> list[tuple[int, int]]:
    """The lines at most `rows` rows thick (all with None)."""
    return lines if rows is None else [ln for ln in lines if ln[1] - ln[0] < rows]


def _long_line_staves(mask: np.ndarray, cfg: PageSplit, thin: int | None = None) -> list[Staff]:
    """Staves of lines at least `cfg.staff_line_fraction` of the longest run (and at most
    `thin` rows thick), over the whole width and in each of `cfg.strips` strips."""
    lines = _thin(staff_lines(mask, cfg.staff_line_fraction), thin)
    found = find_staff_spans(lines, cfg.min_staff_lines)
    width = mask.shape[1]
    for k in range(cfg.strips if cfg.strips > 1 else 0):
        strip = mask[:, k * width // cfg.strips : (k + 1) * width // cfg.strips]
        lines = _thin(staff_lines(strip, cfg.staff_line_fraction), thin)
        found += find_staff_spans(lines, cfg.min_staff_lines)
    return found


def _short_staves(
    mask: np.ndarray, cfg: PageSplit, space: float, thin: int | None = None
) -> list[Staff]:
    """Staves of lines at least `cfg.short_staff_spaces` staff spaces long (and at most
    `thin` rows thick)."""
    short = _thin(staff_lines(mask, 0.0, at_least=cfg.short_staff_spaces * space), thin)
    return find_staff_spans(short, cfg.min_staff_lines)


def group_staves(lines: list[tuple[int, int]], min_lines: int) -> list[tuple[int, int]]:
    """Evenly spaced lines -> staves as (top row, bottom row) (`find_staff_spans`)."""
    return [(s.top, s.bottom) for s in find_staff_spans(lines, min_lines)]


def skew_deg(mask: np.ndarray, max_deg: float) -> float:
    """The tilt in degrees, within +-max_deg, that makes the rows of ink sharpest: the sum of
    squared row counts after shearing each ink pixel back by that tilt (a projection-profile
    deskew; lines lined up with the rows concentrate the ink in few rows). 0 for no ink."""
    ys, xs = np.nonzero(mask)
    if ys.size == 0 or max_deg == 0:
        return 0.0
    every = max(1, ys.size // SKEW_SAMPLE)
    ys, xs = ys[::every], xs[::every].astype(np.float64)
    best, best_score = 0.0, -1.0
    steps = round(max_deg / SKEW_STEP_DEG)
    # Smallest tilts first, so that a tie keeps the smaller one (a level page stays as it is).
    for step in sorted(range(-steps, steps + 1), key=abs):
        angle = step * SKEW_STEP_DEG
        rows = np.round(ys - xs * np.tan(np.radians(angle))).astype(np.int64)
        profile = np.bincount(rows - rows.min()).astype(np.float64)
        score = float(np.dot(profile, profile))
        if score > best_score * (1 + 1e-9):
            best, best_score = angle, score
    return round(best, 3)


def turned_size(size: tuple[int, int], angle_deg: float) -> tuple[int, int]:
    """(width, height) of an image turned by `angle_deg` with its corners kept (PIL's
    rotate(expand=True)): a wide page turned by a few degrees grows by a tenth of its height."""
    width, height = size
    cos, sin = abs(math.cos(math.radians(angle_deg))), abs(math.sin(math.radians(angle_deg)))
    return math.ceil(width * cos + height * sin), math.ceil(width * sin + height * cos)


def deskew(image: Image.Image, max_deg: float, limits: ImageLimits) -> tuple[Image.Image, float]:
    """A grey page turned so that its staff lines are level, and the angle it was turned by
    (degrees, counter-clockwise); the image itself when it is level already.

    Turning enlarges the image, so its size is checked against `limits` before the turned
    copy is made (no allocation past the limit), and again on the copy.

    Raises:
        BadInput: the turned page would be over infer.score.image's limits.
    """
    angle = skew_deg(ink_mask(np.asarray(image)), max_deg)
    if abs(angle) < SKEW_STEP_DEG / 2:
        return image, 0.0
    skip = "infer.score.page.max_skew_deg: 0 skips it"
    after = f"after straightening by {angle:.1f} degrees ({skip})"
    check_image_size(turned_size(image.size, angle), "the page", limits, after)
    level = image.rotate(angle, Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    check_image_size(level.size, "the page", limits, after)
    return level, angle


def find_staves(gray: np.ndarray, cfg: PageSplit) -> list[tuple[int, int]]:
    """(H, W) uint8 grey -> each staff's (top row, bottom row), top to bottom."""
    return [(s.top, s.bottom) for s in page_staves(ink_mask(gray), cfg)]


def split_page(gray: np.ndarray, cfg: PageSplit) -> list[Box]:
    """(H, W) uint8 grey page -> one box per staff system, top to bottom (`cut_page`'s
    boxes)."""
    return [box for box, _ in cut_page(gray, cfg)]


def cut_page(gray: np.ndarray, cfg: PageSplit) -> list[tuple[Box, np.ndarray]]:
    """(H, W) uint8 grey page -> each staff system's box and image, top to bottom.

    The ink is taken as pieces (`ink_pieces`); each goes with the staff whose lines it
    crosses or, between two staves, with the nearer one, so fingerings, dynamics, lyrics and
    notes on many ledger lines never add or remove a system. Above the first staff and below
    the last, a piece goes with that staff only when it lies near the ink the staff already
    holds in its columns (pieces taken nearest first) and is not aligned as header text, so a
    title, a composer, a copyright line or a page number is left out, on a page of one system
    too. A box is the ink of its staff's pieces. Its image is the page within the box; with
    `cfg.own_ink_only`, ownership is strict (`owners`; a staff crosses only the columns its
    lines reach, `staff_columns`) and ink that went with another staff or
    with none is painted over in the paper's grey (`_own_ink`). A page with ink but no staff
    found is one box around all of it (with a warning).
    """
    mask = ink_mask(gray)
    if not mask.any():
        return []
    h, w = mask.shape
    staves = page_staves(mask, cfg)
    if not staves:
        log.warning("no staff found on the page: it is read as one system around all its ink")
        ys, xs = np.nonzero(mask)
        box = _padded(Piece(int(ys.min()), int(ys.max()), int(xs.min()), int(xs.max()) + 1), h, w)
        return [(box, _crop(gray, box))]
    pieces, piece_of = ink_pieces(mask, min(s.space for s in staves))
    columns = [staff_columns(mask, s, cfg) for s in staves] if cfg.own_ink_only else None
    held, staff_of = owners(
        pieces,
        mask,
        piece_of,
        staves,
        reach=cfg.reach_spaces,
        strict=cfg.own_ink_only,
        columns=columns,
    )
    boxes = [_padded(span(mine), h, w) for mine in held]
    if not cfg.own_ink_only:
        return [(box, _crop(gray, box)) for box in boxes]
    ys, xs = np.nonzero(mask)  # staff_of's order
    return [(box, _own_ink(gray, mask, (ys, xs, staff_of), i, box)) for i, box in enumerate(boxes)]


def staff_columns(mask: np.ndarray, staff: Staff, cfg: PageSplit) -> tuple[int, int]:
    """The columns (first, after last) a staff reaches: those of the runs of ink in its rows at
    least STAFF_RUN_SPACES spaces long (its lines, gaps up to `cfg.line_gap_spaces` bridged,
    as `page_staves` finds a broken staff) that follow on from the longest with gaps under
    STAFF_GAP_SPACES, STAFF_END_SPACES more either side."""
    band = mask[staff.top : staff.bottom + 1]
    if cfg.line_gap_spaces > 0:
        band = shift_or(band, max(1, round(cfg.line_gap_spaces * staff.space)), axis=1)
    _, starts, ends = runs(band)
    lines = ends - starts >= STAFF_RUN_SPACES * staff.space
    width = mask.shape[1]
    if not lines.any():  # a staff is found from such runs: the whole width, to be safe
        return 0, width
    starts, ends = starts[lines], ends[lines]
    longest = int(np.argmax(ends - starts))
    first, last = int(starts[longest]), int(ends[longest])
    gap = STAFF_GAP_SPACES * staff.space
    while True:  # take in the runs that reach within `gap` of the columns held so far
        near = (starts < last + gap) & (ends > first - gap)
        grown = int(starts[near].min()), int(ends[near].max())
        if grown == (first, last):
            break
        first, last = grown
    end = round(STAFF_END_SPACES * staff.space)
    return max(0, first - end), min(width, last + end)


def _crop(gray: np.ndarray, box: Box) -> np.ndarray:
    return gray[box.top : box.bottom, box.left : box.right].copy()


def _own_ink(
    gray: np.ndarray,
    mask: np.ndarray,
    ink: tuple[np.ndarray, np.ndarray, np.ndarray],
    i: int,
    box: Box,
) -> np.ndarray:
    """Staff `i`'s image: the page within `box`, its ink that is not staff `i`'s and HALO px
    around it painted in the box's paper grey (the median of its pixels that are not ink).
    `ink`: the ink pixels' rows, columns and staves (-1 for none), in np.nonzero(mask) order."""
    ys, xs, staff_of = ink
    crop = _crop(gray, box)
    inked = mask[box.top : box.bottom, box.left : box.right]
    inside = (ys >= box.top) & (ys < box.bottom) & (xs >= box.left) & (xs < box.right)
    foreign = np.zeros(crop.shape, dtype=bool)
    other = inside & (staff_of != i)
    foreign[ys[other] - box.top, xs[other] - box.left] = True
    if not foreign.any():
        return crop
    own = inked & ~foreign
    paper = crop[~inked]
    crop[_grown(foreign, HALO) & ~own] = int(np.median(paper)) if paper.size else 255
    return crop


def _grown(mask: np.ndarray, by: int) -> np.ndarray:
    """`mask` with every pixel within `by` px (rows and columns) of a True set too."""
    h, w = mask.shape
    padded = np.pad(mask, by)
    out = np.zeros_like(mask)
    for dy in range(2 * by + 1):
        for dx in range(2 * by + 1):
            out |= padded[dy : dy + h, dx : dx + w]
    return out


def _padded(span: Piece, h: int, w: int) -> Box:
    """The box of a span of ink with PAD px of paper around it, within the page."""
    return Box(
        max(0, span.left - PAD),
        max(0, span.top - PAD),
        min(w, span.right + PAD),
        min(h, span.bottom + 1 + PAD),
    )
