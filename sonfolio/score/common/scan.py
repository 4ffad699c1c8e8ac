"""A clean engraved page made to look scanned or photographed.

What real scans and phone pictures of printed music show, each a named kind so that a held-out
measure can be taken per kind as well as with all of them (score_data.scan in params.yaml):

- `dpi`: scanned at 100-300 dpi (the page resampled down from its render, then read as is);
- `jpeg`: JPEG artefacts (quality drawn in a range);
- `threshold`: a scanning app's black-and-white mode (a local, adaptive threshold);
- `skew`: the page placed crooked, up to a few degrees;
- `perspective`: a phone held not quite above the page (the whole sheet in the picture);
- `curl`: a page that does not lie flat (a book's gutter);
- `light`: uneven lighting (a lamp to one side, a shadow);
- `bleed`: the other side's print showing through, mirrored and faint;
- `breaks`: worn or faint print: staff lines and stems broken by thin gaps.

The geometric and photometric transforms are albumentations' (2.0.8, MIT), seeded per page so
a page degrades the same way every run. Thresholding and bleed-through are written here: each
is a few lines of numpy / OpenCV that albumentations has no transform for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonfolio.config.data import SCAN_KINDS as KINDS

if TYPE_CHECKING:
    from sonfolio.config.data import Scan
PAPER = 255
A4_WIDTH_IN = 210 / 25.4


def scan_like(
    gray: np.ndarray,
    dpi: float,
    cfg: Scan,
    seed: int,
    kinds: tuple[str, ...] = KINDS,
    bleed_shift: tuple[float, float] | None = None,
) -> np.ndarray:
    """`gray` (H, W) uint8, a clean page rendered at `dpi`, degraded by each of `kinds` (in
    the order of KINDS), seeded by `seed`. The `dpi` kind resamples the page (its size
    changes); the others keep the size. `bleed_shift`: bleed_through's `shift`.

    Raises:
        ValueError: a kind that is not one of KINDS.
    """
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown scan degradation {unknown}; known: {', '.join(KINDS)}")
    import albumentations as A  # noqa: N812 (its own convention)
    import cv2

    rng = np.random.default_rng(seed)
    page = np.ascontiguousarray(gray)
    # score_data.scan.breaks counts the gaps across an A4 page's width: as many per inch here
    gaps = round(cfg.breaks * page.shape[1] / (A4_WIDTH_IN * dpi))
    if "dpi" in kinds:
        target = float(rng.uniform(*cfg.dpi))
        if target < dpi:
            size = (
                max(1, round(page.shape[1] * target / dpi)),
                max(1, round(page.shape[0] * target / dpi)),
            )
            page = cv2.resize(page, size, interpolation=cv2.INTER_AREA)
    if "bleed" in kinds:
        page = bleed_through(page, cfg.bleed, rng, shift=bleed_shift)
    steps = {  # built only when drawn: albumentations checks each one's settings
        "skew": lambda: A.Rotate(
            limit=cfg.skew_deg, border_mode=cv2.BORDER_CONSTANT, fill=PAPER, p=1.0
        ),
        # fit_output: the whole sheet stays in the picture, as a phone user frames it; by
        # default albumentations zooms into the warped page, which cut the clef and the
        # first notes off pages with narrow margins (Verovio's are 6 mm)
        "perspective": lambda: A.Perspective(
            scale=(cfg.perspective / 2, cfg.perspective), fit_output=True, fill=PAPER, p=1.0
        ),
        "curl": lambda: A.OpticalDistortion(
            distort_limit=(-cfg.curl, cfg.curl), border_mode=cv2.BORDER_CONSTANT, fill=PAPER, p=1.0
        ),
        "light": lambda: A.Illumination(
            mode="gaussian", intensity_range=(cfg.light / 2, cfg.light), effect_type="darken", p=1.0
        ),
        "breaks": lambda: A.XYMasking(
            num_masks_x=(max(1, gaps // 2), max(1, gaps)), mask_x_length=(1, 3), fill=PAPER, p=1.0
        ),
        "jpeg": lambda: A.ImageCompression(quality_range=tuple(cfg.jpeg_quality), p=1.0),
    }
    chosen = [steps[k]() for k in KINDS if k in kinds and k in steps]
    if chosen:
        page = A.Compose(chosen, seed=int(rng.integers(2**31)))(image=page)["image"]
    if "threshold" in kinds:  # a scanning app's black-and-white mode: a local threshold
        block = max(3, page.shape[1] // 40) | 1  # odd, a few staff spaces wide
        page = cv2.adaptiveThreshold(
            page, PAPER, cv2.ADAPTIVE_THRESH_GAUSSIAN_C, cv2.THRESH_BINARY, block, 15
        )
    return page


def bleed_through(
    page: np.ndarray,
    strength: float,
    rng: np.random.Generator,
    back: np.ndarray | None = None,
    shift: tuple[float, float] | None = None,
) -> np.ndarray:
    """`back` (the sheet's other side, as printed; the page's own print where None or of
    another size: a page's back holds music of the same layout), mirrored left to right,
    shifted and faint, under the page's ink: what the other side of a thin sheet shows. Its
    darkness is drawn in [strength / 2, strength]. `shift`: moved up or down by a share of
    the height drawn in [least, most] (a system alone, whose back's staves lie anywhere
    against its own); None: by at most 2 % (a whole page, whose back has the same margins)."""
    if back is None or back.shape != page.shape:
        back = page
    back = np.ascontiguousarray(back[:, ::-1])
    height = page.shape[0]
    if shift is None:
        rows = int(rng.integers(-height // 50, height // 50 + 1))
    else:
        rows = round(float(rng.uniform(*shift)) * height) * int(rng.choice((-1, 1)))
    back = np.roll(back, rows, axis=0)
    ink_behind = (PAPER - back.astype(np.float32)) * float(rng.uniform(strength / 2, strength))
    return np.minimum(page.astype(np.float32), PAPER - ink_behind).astype(np.uint8)
