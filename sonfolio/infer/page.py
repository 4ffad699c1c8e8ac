"""A page image -> one box per staff system, top to bottom.

The score model reads one single-staff system at a time, so a page is cut first: staff lines are
found as rows holding a long horizontal run of ink, evenly spaced lines are grouped into staves,
and neighbouring staves are separated at the emptiest row between them. Each box is then trimmed
to the ink it holds.

Written here with numpy because no installed library does it: the environment has no OpenCV,
scikit-image or scipy, and the open-source OMR tools that segment staves (e.g. oemer, homr)
bring their own neural models. A staff line tilted by more than a fraction of a degree is
broken into short runs, so a page is first straightened: the tilt (within `max_skew_deg`) that
makes the ink's row profile sharpest is undone; the turned page is held to the same pixel
limit as the upload (infer.image), checked before it is made.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from sonfolio.infer.inputs import check_image_size

if TYPE_CHECKING:
    from sonfolio.config.infer import ImageLimits, PageSplit

log = logging.getLogger(__name__)

# A pixel is ink when it is at least this share of the way from the paper's grey (the median
# pixel: most of a page is paper) to the ink's (the darkest percentile). A quarter keeps the
# anti-aliased grey rows of a thin staff line, which a 50% cut can drop.
INK_SHARE = 0.25
LINE_SPACING_TOLERANCE = 0.3  # a staff's line gaps may differ this much from its first gap
PAD = 2  # px of paper kept around each system's ink, as LilyPond's tight crop leaves some
SKEW_STEP_DEG = 0.1  # tilts tried: every 0.1 degree (a 2,000 px line drifts 3.5 px per step)
SKEW_SAMPLE = 200_000  # ink pixels enough to score a tilt; more are subsampled


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
    ink = float(np.percentile(gray, 1))
    if paper - ink < 32:  # no contrast: a blank (or uniformly dark) image has no ink
        return np.zeros(gray.shape, dtype=bool)
    return gray < paper - INK_SHARE * (paper - ink)


def longest_runs(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool -> (H,) the longest run of consecutive True in each row."""
    padded = np.pad(mask.astype(np.int8), ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)  # +1 where a run starts, -1 just after it ends
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)  # row-major order: pairs with the starts
    out = np.zeros(mask.shape[0], dtype=np.int64)
    np.maximum.at(out, rows, ends - starts)
    return out


def staff_lines(mask: np.ndarray, fraction: float) -> list[tuple[int, int]]:
    """Rows (first, last) of each horizontal line: a run of rows whose longest ink run is at
    least `fraction` of the longest one on the page (a staff line runs through the notes on it,
    so it is the longest run there is; beams, text and ledger lines are far shorter)."""
    runs = longest_runs(mask)
    if runs.max(initial=0) == 0:
        return []
    rows = np.flatnonzero(runs >= fraction * runs.max())
    breaks = np.flatnonzero(np.diff(rows) > 1)
    firsts = np.concatenate([rows[:1], rows[breaks + 1]])
    lasts = np.concatenate([rows[breaks], rows[-1:]])
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


def group_staves(lines: list[tuple[int, int]], min_lines: int) -> list[tuple[int, int]]:
    """Evenly spaced lines -> staves as (top row, bottom row); groups of fewer than
    `min_lines` (a lone bracket, a long beam) are dropped."""
    staves: list[tuple[int, int]] = []
    group: list[tuple[int, int]] = []

    def centre(line: tuple[int, int]) -> float:
        return (line[0] + line[1]) / 2

    def close(g: list[tuple[int, int]]) -> None:
        if len(g) >= min_lines:
            staves.append((g[0][0], g[-1][1]))

    for line in lines:
        if len(group) < 2:
            group.append(line)
            continue
        spacing = centre(group[1]) - centre(group[0])
        gap = centre(line) - centre(group[-1])
        if abs(gap - spacing) <= LINE_SPACING_TOLERANCE * spacing:
            group.append(line)
        elif len(group) >= min_lines:
            close(group)
            group = [line]
        else:  # not a staff yet: its last line may still open one with this line
            group = [group[-1], line]
    close(group)
    return staves


def _cut(mask: np.ndarray, upper: tuple[int, int], lower: tuple[int, int]) -> int:
    """The emptiest row between two staves; the one nearest the middle on a tie."""
    lo, hi = upper[1] + 1, lower[0]
    if hi <= lo:
        return lo
    ink = mask[lo:hi].sum(axis=1)
    candidates = np.flatnonzero(ink == ink.min()) + lo
    return int(candidates[np.argmin(np.abs(candidates - (lo + hi) / 2))])


def _trim(mask: np.ndarray, top: int, bottom: int) -> Box | None:
    band = mask[top:bottom]
    rows, cols = np.flatnonzero(band.any(axis=1)), np.flatnonzero(band.any(axis=0))
    if rows.size == 0:
        return None
    h, w = mask.shape
    return Box(
        max(0, int(cols[0]) - PAD),
        max(0, top + int(rows[0]) - PAD),
        min(w, int(cols[-1]) + 1 + PAD),
        min(h, top + int(rows[-1]) + 1 + PAD),
    )


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
        BadInput: the turned page would be over infer.image's limits.
    """
    angle = skew_deg(ink_mask(np.asarray(image)), max_deg)
    if abs(angle) < SKEW_STEP_DEG / 2:
        return image, 0.0
    after = f"after straightening by {angle:.1f} degrees (infer.page.max_skew_deg: 0 skips it)"
    check_image_size(turned_size(image.size, angle), "the page", limits, after)
    level = image.rotate(angle, Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    check_image_size(level.size, "the page", limits, after)
    return level, angle


def find_staves(gray: np.ndarray, cfg: PageSplit) -> list[tuple[int, int]]:
    """(H, W) uint8 grey -> each staff's (top row, bottom row), top to bottom."""
    mask = ink_mask(gray)
    return group_staves(staff_lines(mask, cfg.staff_line_fraction), cfg.min_staff_lines)


def split_page(gray: np.ndarray, cfg: PageSplit) -> list[Box]:
    """(H, W) uint8 grey page -> one box per staff system, top to bottom.

    Neighbouring staves are cut at the emptiest row between them. The first system reaches up
    (and the last down) no further than the largest reach of the others, so a title or a footer
    is left out; a page with one staff (or none found) is one box around all its ink.
    """
    mask = ink_mask(gray)
    staves = group_staves(staff_lines(mask, cfg.staff_line_fraction), cfg.min_staff_lines)
    h = gray.shape[0]
    if len(staves) < 2:
        box = _trim(mask, 0, h)
        return [box] if box is not None else []
    cuts = [_cut(mask, a, b) for a, b in zip(staves, staves[1:], strict=False)]
    above = max(s[0] - c for s, c in zip(staves[1:], cuts, strict=True))
    below = max(c - s[1] for s, c in zip(staves[:-1], cuts, strict=True))
    tops = [max(0, staves[0][0] - above), *cuts]
    bottoms = [*cuts, min(h, staves[-1][1] + below + 1)]
    boxes = [_trim(mask, t, b) for t, b in zip(tops, bottoms, strict=True)]
    return [b for b in boxes if b is not None]
