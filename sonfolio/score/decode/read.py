"""A grey image read into LilyPond text, system by system: the page cut into its staff systems
(sonfolio.score.common.page), each system scaled as the training images were made and decoded
by a model variant, greedily or under the canonical grammar. What `sonfolio read`, the service
and the eval's whole pages run."""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from sonfolio.parallel import slices
from sonfolio.score.common.canonical import CanonicalError, validate
from sonfolio.score.common.page import PAD, Box, cut_page, deskew, find_staves, ink_mask
from sonfolio.score.common.pixels import load_image, pixel_array
from sonfolio.score.decode.vocab import Carry, next_time

if TYPE_CHECKING:
    from sonfolio.config.infer import Infer
    from sonfolio.variants import Variant

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SystemText:
    """One staff system read from an image."""

    index: int  # 1-based, top to bottom
    box: Box  # where it lies in the image
    text: str
    problem: str | None  # why the text is not canonical LilyPond; None when it is
    time: str | None = None  # the time signature in force before it (the system above's)

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "box": self.box.as_list(),
            "text": self.text,
            "canonical": self.problem is None,
            "problem": self.problem,
            "time": self.time,
        }


@dataclass(frozen=True)
class Reading:
    """An image's systems, top to bottom. `deskew_deg`: the page was turned by that much
    (counter-clockwise) before it was cut, and the boxes lie in the turned image; 0: as given."""

    systems: list[SystemText]
    deskew_deg: float


def system_images(
    image: Image.Image, page: bool | None, cfg: Infer
) -> tuple[list[Box], list[Image.Image], float]:
    """Where the systems lie and their images: the whole image (page False), or the
    straightened page cut into systems (True: `cut_page`, each system's image its box with
    `infer.score.page.own_ink_only`'s painting), or, with None, the latter only when it has more
    than one staff. Returns the boxes (in the turned image), the images and the turn applied."""
    whole = ([Box(0, 0, image.width, image.height)], [image], 0.0)
    if page is False:
        return whole
    score = cfg.score
    level, angle = deskew(image, score.page.max_skew_deg, score.image)
    gray = np.asarray(level)
    if page is None:
        staves = len(find_staves(gray, score.page))
        log.info("%d staves found: %s", staves, "a page" if staves > 1 else "one system")
        if staves <= 1:
            return whole
    if angle:
        log.info("page straightened by %.1f degrees", angle)
    systems = cut_page(gray, score.page)
    crops = [level_system(Image.fromarray(crop), cfg) for _, crop in systems]
    return [box for box, _ in systems], crops, angle


def level_system(crop: Image.Image, cfg: Infer) -> Image.Image:
    """A system's image straightened on its own (within infer.score.system_skew_deg, when tilted
    by at least infer.score.system_skew_min_deg) and cut back to its ink: a photographed page's
    perspective tilts its lines by different angles, so one turn of the page leaves some of
    them crooked, which the model never saw in training."""
    score = cfg.score
    level, angle = deskew(crop, score.system_skew_deg, score.image)
    if not angle or abs(angle) < score.system_skew_min_deg:
        return crop
    ys, xs = np.nonzero(ink_mask(np.asarray(level)))
    if ys.size == 0:
        return crop
    return level.crop(
        (
            max(0, int(xs.min()) - PAD),
            max(0, int(ys.min()) - PAD),
            min(level.width, int(xs.max()) + 1 + PAD),
            min(level.height, int(ys.max()) + 1 + PAD),
        )
    )


def pixel_values(images: Sequence[Image.Image], processor: Any) -> np.ndarray:
    """Grey system images -> (B, 1, H, W) float32 model input, as the training images were made.

    `processor` is the variant's canvas (sonfolio.score.common.pixels.Canvas, or transformers'
    ViTImageProcessor): its size is (height, width)."""
    height, width = processor.size["height"], processor.size["width"]
    arrays = []
    for img in images:
        scale = width / max(img.size)
        img = img.resize(
            (max(1, round(img.width * scale)), max(1, round(img.height * scale))),
            Image.Resampling.LANCZOS,
        )
        buf = io.BytesIO()
        img.save(buf, format="PNG")  # lossless, as the stored training images
        buf.seek(0)
        arrays.append(load_image(buf, height, width))  # PIL opens a file object as a path
    return pixel_array(np.stack(arrays))


def problem(text: str, time: str | None = None) -> str | None:
    try:
        validate(text, time)
    except CanonicalError as err:
        return str(err)
    return None


def read_image(variant: Variant, image: Image.Image, page: bool | None, cfg: Infer) -> Reading:
    """Every staff system of a grey image, read into LilyPond text.

    Systems are read top to bottom, each in the time signature the one above leaves in force
    (canonical.time_after; the first: none known), which a system that prints none needs for
    its bar checks; with `infer.score.constrained` the decoding itself keeps to the grammar
    (sonfolio.score.decode), else it is greedy and only checked.
    """
    boxes, crops, angle = system_images(image, page, cfg)
    if not boxes:
        return Reading([], angle)
    pixels = pixel_values(crops, variant.processor)
    texts: list[str] = []
    times: list[str | None] = []  # the time in force before each system
    time: str | None = None  # in force before the next system to decode
    for part in slices(len(crops), cfg.batch_size):
        if cfg.score.constrained:
            batch = variant.generate(
                pixels[part], cfg.score.max_tokens, times=Carry(time), constrained=True
            )
        else:
            batch = variant.generate(pixels[part], cfg.score.max_tokens)
        for text in batch:
            texts.append(text.strip())
            times.append(time)
            time = next_time(texts[-1], time)
    systems = [
        SystemText(i + 1, box, text, problem(text, t), t)
        for i, (box, text, t) in enumerate(zip(boxes, texts, times, strict=True))
    ]
    return Reading(systems, angle)
