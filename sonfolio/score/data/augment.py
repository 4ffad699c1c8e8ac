"""Scan-like degradation of a rendered system: rotation, uneven ink, blur, noise.

Seeded per image (the caller makes one generator per image id), so the same image always gets
the same degradation: a test can re-render a manifest text and compare it with the stored image
pixel for pixel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageFilter

if TYPE_CHECKING:
    from sonfolio.config.data import Augment


def rotate(img: Image.Image, cfg: Augment, rng: np.random.Generator) -> Image.Image:
    """A small random rotation on white, the box expanded so no corner is cut."""
    if cfg.rotation_deg <= 0:
        return img
    angle = float(rng.uniform(-cfg.rotation_deg, cfg.rotation_deg))
    return img.rotate(angle, resample=Image.Resampling.BILINEAR, expand=True, fillcolor=255)


def degrade(img: Image.Image, cfg: Augment, rng: np.random.Generator) -> Image.Image:
    """Uneven ink, blur and noise on a grayscale ("L") image; `img` is not changed."""
    pixels = np.asarray(img, dtype=np.float32) / 255.0  # (H, W), 1 = paper
    if cfg.ink > 0:
        # Patchy fading: ink darkness times a smooth random field (a coarse grid, upsampled).
        h, w = pixels.shape
        grid = rng.uniform(1.0 - cfg.ink, 1.0, size=(max(2, h // 32), max(2, w // 32)))
        field = Image.fromarray((grid * 255).astype(np.uint8)).resize(
            (w, h), Image.Resampling.BICUBIC
        )
        pixels = 1.0 - (1.0 - pixels) * (np.asarray(field, dtype=np.float32) / 255.0)
    img = Image.fromarray((pixels * 255).round().astype(np.uint8))
    if cfg.blur_radius > 0:
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0, cfg.blur_radius))))
    if cfg.noise_std > 0:
        pixels = np.asarray(img, dtype=np.float32)  # 0..255
        noise = rng.standard_normal(pixels.shape, dtype=np.float32)
        pixels += noise * np.float32(cfg.noise_std * 255.0)
        img = Image.fromarray(np.clip(pixels, 0, 255).round().astype(np.uint8))
    return img
