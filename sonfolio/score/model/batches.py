"""Score systems as training batches: each image padded to one fixed (height, width), ink = 1
(sonfolio.score.common.pixels, which the inference path uses without torch).

Labels and batches as every track's (sonfolio.train.samples): ids without the leading <s>,
ending in </s>, padded with -100.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import UnidentifiedImageError
from transformers import PreTrainedTokenizerBase, ViTImageProcessor

from sonfolio.score.common.pixels import load_image, pixel_array
from sonfolio.train import samples
from sonfolio.train.samples import LabelledRows

if TYPE_CHECKING:
    from sonfolio.config.train import ScoreJitter

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


def jitter(cfg: ScoreJitter) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """`score_train.jitter` as a train batch's change (None: off): each image shrunk, moved and
    turned a little (one affine warp, the margins white), its ink faded and noise added,
    drawn afresh every step from torch's global RNG, so the model never sees one image twice
    in 13 epochs. The data stage's augmentation draws once per image and the training images
    are read into memory once; this runs on the batch on the device (a GPU does it in
    microseconds), which torchvision's per-image PIL transforms in the loader would not."""
    if not cfg.enabled:
        return None

    def change(batch: dict[str, Any]) -> dict[str, Any]:
        x = batch["pixel_values"]  # (B, 1, H, W), ink 1, paper 0
        n, _, height, width = x.shape

        def draw(low: float, high: float) -> torch.Tensor:
            return torch.empty(n, device=x.device).uniform_(low, high)

        # only ever smaller, and moved within the margin that leaves: the training images are
        # cropped to their ink (LilyPond's to 0-7 px), so a larger or shifted one would lose
        # a final bar line or a ledger note its text still holds
        zoom = draw(1 - cfg.scale, 1.0)
        turn = torch.deg2rad(draw(-cfg.rotate_deg, cfg.rotate_deg))
        # affine_grid works in [-1, 1] across each side: a shift of `room` px is 2 * room / side
        room = (1 - zoom).clamp(max=1.0)
        dx = draw(-1, 1) * torch.minimum(room * width / 2, torch.tensor(cfg.shift_px)) * 2 / width
        dy = draw(-1, 1) * torch.minimum(room * height / 2, torch.tensor(cfg.shift_px)) * 2 / height
        cos, sin, aspect = torch.cos(turn) / zoom, torch.sin(turn) / zoom, width / height
        theta = torch.stack(
            [
                torch.stack([cos, -sin / aspect, dx], dim=1),
                torch.stack([sin * aspect, cos, dy], dim=1),
            ],
            dim=1,
        )
        grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        x = x * draw(1 - cfg.fade, 1.0).view(n, 1, 1, 1)
        if cfg.noise_std:
            x = x + torch.randn_like(x) * cfg.noise_std
        return {**batch, "pixel_values": x.clamp_(0.0, 1.0)}

    return change
