"""Score systems as model inputs: each image padded to one fixed (height, width), ink = 1.

A ViT encoder has one position embedding per patch, so every image must have the same shape.
Systems are ~640 px wide and 50-300 px tall: each is scaled down only if it does not fit, then
placed at the left, centred vertically, on a blank (0) canvas. Pixels are inverted (ink 1,
paper 0) so that the padding is blank paper.

Labels and batches as every track's (sonfolio.train.samples): ids without the leading <s>,
ending in </s>, padded with -100.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from transformers import PreTrainedTokenizerBase, ViTImageProcessor

from sonfolio.train import samples
from sonfolio.train.samples import LabelledRows

log = logging.getLogger(__name__)


def load_image(path: Path, height: int, width: int) -> np.ndarray:
    """(height, width) uint8, ink = 255, padded with 0.

    Raises:
        OSError, UnidentifiedImageError, ValueError: unreadable or truncated file.
    """
    with Image.open(path) as img:
        img = img.convert("L")
        scale = min(1.0, height / img.height, width / img.width)
        if scale < 1.0:
            size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
            img = img.resize(size, Image.Resampling.BILINEAR)
        pixels = 255 - np.asarray(img, dtype=np.uint8)
    canvas = np.zeros((height, width), dtype=np.uint8)
    top = (height - pixels.shape[0]) // 2
    canvas[top : top + pixels.shape[0], : pixels.shape[1]] = pixels
    return canvas


def to_pixel_values(images: np.ndarray) -> torch.Tensor:
    """(B, H, W) uint8 -> (B, 1, H, W) float in [0, 1]."""
    return torch.from_numpy(images).unsqueeze(1).float().div_(255.0)


def image_processor(height: int, width: int) -> ViTImageProcessor:
    """The image processor saved beside a score model: it records the canvas (height, width)
    and changes nothing, as the pixels come prepared (load_image, to_pixel_values)."""
    return ViTImageProcessor(
        do_resize=False,
        do_rescale=False,
        do_normalize=False,
        size={"height": height, "width": width},
    )


class ScoreSystems(LabelledRows):
    """Rows of the score manifest (one split) as (image, label ids) pairs; an unreadable
    image is an error marker (LabelledRows._load)."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        root: Path,
        tokenizer: PreTrainedTokenizerBase,
        start_id: int,
        shape: tuple[int, int],
        max_tokens: int,
    ) -> None:
        super().__init__(rows, tokenizer, start_id, max_tokens, "systems")
        self.root, self.shape = root, shape

    def _load(self, i: int) -> dict[str, Any]:
        path = self.root / self.rows[i]["image"]
        try:
            image = load_image(path, *self.shape)
        except (OSError, UnidentifiedImageError, ValueError) as err:
            log.debug("unreadable image %s: %s", path, err)
            return {"index": i, "error": str(err)}
        return {"index": i, "image": image, "labels": self.labels[i]}


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch of systems (sonfolio.train.samples.collate): pixel values (B, 1, H, W)."""
    return samples.collate(
        items,
        "pixel_values",
        lambda good: to_pixel_values(np.stack([x["image"] for x in good])),
        "every sample of a batch is unreadable",
    )
