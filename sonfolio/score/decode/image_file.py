"""An image file or upload -> a fully decoded grey page, or an error that names the input and
the fix (sonfolio.limits.BadInput). Content is checked by decoding it: Pillow recognises an
image by its magic bytes; the size is checked from the header, before anything is decoded."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from sonfolio.limits import BadInput, check_image_size, read_input

if TYPE_CHECKING:
    from sonfolio.config.infer import ImageLimits

log = logging.getLogger(__name__)

IMAGE_FORMATS = "PNG, JPEG, TIFF, BMP, GIF or WebP"
# Pillow's decoders that may open a file (its JPEG one also opens a camera's multi-picture
# JPEG); any other format Pillow knows (DDS, ICO, PCX, PPM, SGI, TGA, ...) is refused as not a
# score image: fewer decoders, less attack surface, and the documented list is what is read.
PILLOW_FORMATS = ("PNG", "JPEG", "TIFF", "BMP", "GIF", "WEBP")


def open_image(source: bytes | Path, name: str, limits: ImageLimits) -> Image.Image:
    """A file or upload -> a fully decoded grey ("L") image, transparency laid on white paper.

    The size and shape are checked from the header, before any pixel is decoded. Every mode is
    turned into 8-bit grey by its own range (16-bit, 32-bit and float pixels scaled, not
    clipped), and an image of several frames (an animated GIF, a multi-page TIFF) is refused:
    Sonfolio reads one page per file, and reading only the first frame would drop the rest
    unseen (docs/inference.md).

    Raises:
        BadInput: missing, not an image, truncated, empty, several frames, a mode with no grey,
            or over `limits` (kind "too_large": pixels; "limit": aspect ratio).
    """
    data = read_input(source, name)
    if not data:
        raise BadInput("empty", f"{name} is empty (0 bytes): send an image of a score")
    try:
        with warnings.catch_warnings():
            # Pillow's warning (~89 M pixels) gives way to infer.score.image.max_pixels, checked
            # below per call; its own error (~179 M, twice Image.MAX_IMAGE_PIXELS) still stops
            # bigger.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            # lazy: reads the header, decodes nothing yet
            img = Image.open(io.BytesIO(data), formats=PILLOW_FORMATS)
            check_image_size(img.size, name, limits)
            _one_frame(img, name)
            img.load()
            img = _upright(img, name)
    except BadInput:  # a limit met: a ValueError, but not damaged data
        raise
    except UnidentifiedImageError:
        raise BadInput(
            "unsupported", f"{name} is not an image: send a {IMAGE_FORMATS} file of a score"
        ) from None
    except Image.DecompressionBombError as err:
        raise BadInput(
            "too_large",
            f"{name}: {err}; infer.score.image.max_pixels is {limits.max_pixels:,}: scale it down",
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError) as err:  # truncated or damaged data
        raise BadInput("corrupt", f"{name}: the image data is damaged ({err})") from None
    return to_gray(img, name)


def _upright(img: Image.Image, name: str) -> Image.Image:
    """The picture as it is shown: a phone stores a photo turned and says so in its EXIF
    orientation (6: turned 90 degrees), which viewers apply; read raw, the staves would run
    down the page."""
    orientation = img.getexif().get(ExifTags.Base.Orientation, 1)
    if orientation in (None, 1):
        return img
    log.info("%s: turned upright by its EXIF orientation (%s)", name, orientation)
    return ImageOps.exif_transpose(img)


def _one_frame(img: Image.Image, name: str) -> None:
    if not getattr(img, "is_animated", False):
        return
    if img.format == "MPO":  # a camera JPEG: frame 0 is the picture, the rest previews/depth
        log.info("%s: a multi-picture JPEG: its main picture (frame 1) is read", name)
        return
    raise BadInput(
        "unsupported",
        f"{name} holds several frames (an animated image or a multi-page {img.format} file): "
        "Sonfolio reads one page per file: save each page as its own image",
    )


# Pillow's modes of more than 8 bits a pixel; convert("L") clips them at 255 (a 16-bit scan
# becomes a blank page), so they are scaled here from their own range.
_DEEP_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


def _scale_to_8bit(pixels: np.ndarray) -> np.ndarray:
    """(H, W) 16-bit, 32-bit or float pixels -> (H, W) uint8 by the range they are written in:
    16-bit by 65,535 (the range of its type, however dark the page), float in [0, 1] by 1,
    whatever else by its own minimum and maximum. float32 keeps the copy at 4 bytes a pixel."""
    values = np.nan_to_num(pixels.astype(np.float32, copy=False), nan=0.0)
    low, high = float(values.min()), float(values.max())
    if pixels.dtype.kind == "u" and pixels.dtype.itemsize == 2:
        low, high = 0.0, 65535.0
    elif low >= 0.0 and high <= 1.0 and pixels.dtype.kind == "f":
        low, high = 0.0, 1.0
    elif low >= 0.0 and high <= 255.0:  # 8-bit values in a wide mode
        low, high = 0.0, 255.0
    elif low >= 0.0 and high <= 65535.0:  # 16-bit values in a 32-bit mode (older PNG readers)
        low, high = 0.0, 65535.0
    scale = 255.0 / (high - low) if high > low else 0.0
    values -= low
    values *= scale
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


def to_gray(img: Image.Image, name: str) -> Image.Image:
    """A decoded image of any mode -> 8-bit grey; transparent pixels become white paper.

    Raises:
        BadInput: a mode Pillow has no grey for.
    """
    if img.mode in _DEEP_MODES:
        return Image.fromarray(_scale_to_8bit(np.asarray(img)), "L")
    if img.mode == "LAB":
        return img.getchannel("L")  # lightness already
    try:
        if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
            # Grey and alpha, composited on white; a grey image with alpha is split as it is,
            # any other through RGBA (a palette's transparency needs it) for the time it takes.
            la = img if img.mode == "LA" else img.convert("RGBA").convert("LA")
            gray, alpha = la.split()
            return Image.composite(gray, Image.new("L", img.size, 255), alpha)
        return img.convert("L")
    except ValueError:
        raise BadInput(
            "unsupported",
            f"{name}: its {img.mode} pixels cannot be turned into grey: save it as grey, RGB "
            "or CMYK",
        ) from None
