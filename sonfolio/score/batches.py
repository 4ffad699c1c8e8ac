"""Score systems as model inputs: each image padded to one fixed (height, width), ink = 1.

A ViT encoder has one position embedding per patch, so every image must have the same shape.
Systems are ~640 px wide and 50-300 px tall: each is scaled down only if it does not fit, then
placed at the left, centred vertically, on a blank (0) canvas. Pixels are inverted (ink 1,
paper 0) so that the padding is blank paper.

Labels are the tokenizer's ids without the leading <s> (the model's decoder_start_token_id
puts it back when it shifts the labels right), ending in </s>; padding is -100 (ignored).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset
from transformers import PreTrainedTokenizerBase

from sonfolio.train.engine import INDICES, SKIPPED, TOKENS

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


def label_ids(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], start_id: int
) -> list[list[int]]:
    ids = tokenizer(texts, add_special_tokens=True)["input_ids"]
    return [x[1:] if x and x[0] == start_id else x for x in ids]


class ScoreSystems(Dataset):
    """Rows of the score manifest (one split) as (image, label ids) pairs.

    A row whose image cannot be read comes back as {"index": i, "error": ...}; the collate
    function drops it and lists it, and the engine counts and caps such samples.
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        root: Path,
        tokenizer: PreTrainedTokenizerBase,
        start_id: int,
        shape: tuple[int, int],
        max_tokens: int,
    ) -> None:
        labels = label_ids(tokenizer, [r["text"] for r in rows], start_id)
        keep = [i for i, x in enumerate(labels) if len(x) <= max_tokens]
        self.too_long = len(rows) - len(keep)
        if self.too_long:
            log.warning("%d systems longer than %d tokens left out", self.too_long, max_tokens)
        self.rows = [rows[i] for i in keep]
        self.labels = [labels[i] for i in keep]
        self._cache: list[dict[str, Any]] | None = None
        self.root, self.shape = root, shape

    def __len__(self) -> int:
        return len(self.rows)

    def preload(self) -> None:
        """Decode every sample once and keep it in memory (the CPU default; see
        sonfolio.train.speed.loader_workers). Unreadable ones stay error markers."""
        if self._cache is None:
            self._cache = [self._load(i) for i in range(len(self))]

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self._cache[i] if self._cache is not None else self._load(i)

    def _load(self, i: int) -> dict[str, Any]:
        path = self.root / self.rows[i]["image"]
        try:
            image = load_image(path, *self.shape)
        except (OSError, UnidentifiedImageError, ValueError) as err:
            log.debug("unreadable image %s: %s", path, err)
            return {"index": i, "error": str(err)}
        return {"index": i, "image": image, "labels": self.labels[i]}

    def longest(self) -> int:
        return max(range(len(self)), key=lambda i: len(self.labels[i]))


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    good = [x for x in items if "error" not in x]
    if not good:
        raise ValueError(f"every sample of a batch is unreadable: {[x['index'] for x in items]}")
    longest = max(len(x["labels"]) for x in good)
    labels = torch.full((len(good), longest), -100, dtype=torch.long)
    for row, x in enumerate(good):
        labels[row, : len(x["labels"])] = torch.tensor(x["labels"])
    return {
        "pixel_values": to_pixel_values(np.stack([x["image"] for x in good])),
        "labels": labels,
        SKIPPED: [x["index"] for x in items if "error" in x],
        INDICES: [x["index"] for x in good],
        TOKENS: sum(len(x["labels"]) for x in good),
    }
