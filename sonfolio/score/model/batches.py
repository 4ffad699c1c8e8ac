"""Score systems as training batches: each image padded to one fixed (height, width), ink = 1
(sonfolio.score.common.pixels, which the inference path uses without torch).

Labels and batches as every track's (sonfolio.train.samples): ids without the leading <s>,
ending in </s>, padded with -100.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import UnidentifiedImageError
from transformers import PreTrainedTokenizerBase, ViTImageProcessor

from sonfolio.score.common.pixels import load_image, pixel_array
from sonfolio.train import samples
from sonfolio.train.samples import LabelledRows

log = logging.getLogger(__name__)


def to_pixel_values(images: np.ndarray) -> torch.Tensor:
    """(B, H, W) uint8 -> (B, 1, H, W) float in [0, 1], a torch tensor (training, the eval)."""
    return torch.from_numpy(pixel_array(images))


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
