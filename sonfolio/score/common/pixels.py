"""A staff system as the score model sees it, in numpy: the image fitted into one fixed canvas
(height, width), ink = 1, and the canvas read from a model folder without transformers.

A ViT encoder has one position embedding per patch, so every image must have the same shape.
Systems are ~640 px wide and 50-300 px tall: each is scaled down only if it does not fit, then
placed at the left, centred vertically, on a blank (0) canvas. Pixels are inverted (ink 1,
paper 0) so that the padding is blank paper. Training (sonfolio.score.model.batches), the eval
and the inference path all make their inputs here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image

PROCESSOR_FILE = "preprocessor_config.json"


def load_image(path: Path | IO[bytes], height: int, width: int) -> np.ndarray:
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


def pixel_array(images: np.ndarray) -> np.ndarray:
    """(B, H, W) uint8 -> (B, 1, H, W) float32 in [0, 1]."""
    return (images[:, None].astype(np.float32)) / np.float32(255.0)


@dataclass(frozen=True)
class Canvas:
    """The model's input size, as the image processor saved beside a score model records it
    (sonfolio.score.model.batches.image_processor: a ViTImageProcessor that changes nothing).

    Attributes:
        size: {"height": H, "width": W}, as ViTImageProcessor.size.
    """

    size: dict[str, int]

    @classmethod
    def from_folder(cls, folder: Path) -> Canvas:
        """Raises ValueError naming the file where it holds no canvas size."""
        path = Path(folder) / PROCESSOR_FILE
        try:
            size = json.loads(path.read_text(encoding="utf-8"))["size"]
            height, width = int(size["height"]), int(size["width"])
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} is unreadable ({err}): re-save the model") from err
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(
                f"{path} states no size {{height, width}} ({err}): re-save the model"
            ) from err
        if height <= 0 or width <= 0:
            raise ValueError(f"{path}: size {height} x {width}: re-save the model")
        return cls({"height": height, "width": width})
