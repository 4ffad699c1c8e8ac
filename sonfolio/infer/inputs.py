"""Files and uploads -> what the models read, or an error that names the input and the fix.

Content is checked by decoding it, never by the name or the declared type: Pillow recognises an
image by its magic bytes, libsndfile an audio file by its header. The service turns the error's
`kind` into an HTTP status (unsupported: 415, missing: 404, else 400); the CLI exits with 2.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from sonfolio.speech.audio import AudioError, decode

IMAGE_FORMATS = "PNG, JPEG, TIFF, BMP, GIF or WebP"
AUDIO_FORMATS = "WAV, FLAC, OGG or MP3"


class BadInput(ValueError):
    """An input that cannot be used.

    Attributes:
        kind: "missing" (no such file), "unsupported" (not an image / not audio), "corrupt"
            (the right kind of file, but undecodable), or "empty" (nothing in it).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _read(source: bytes | Path, name: str) -> bytes:
    if isinstance(source, bytes):
        return source
    if not source.is_file():
        raise BadInput("missing", f"{name}: no such file (check the path)")
    try:
        return source.read_bytes()
    except OSError as err:
        raise BadInput(
            "missing", f"{name}: cannot be read ({err.strerror}): check its permissions"
        ) from None


def open_image(source: bytes | Path, name: str) -> Image.Image:
    """A file or upload -> a fully decoded grey ("L") image, transparency laid on white paper.

    Raises:
        BadInput: missing, not an image, truncated, empty, or a decompression bomb.
    """
    data = _read(source, name)
    if not data:
        raise BadInput("empty", f"{name} is empty (0 bytes): send an image of a score")
    try:
        with warnings.catch_warnings():
            # Pillow warns above ~89 M pixels and fails above twice that: refuse both.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            img.load()
    except UnidentifiedImageError:
        raise BadInput(
            "unsupported", f"{name} is not an image: send a {IMAGE_FORMATS} file of a score"
        ) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadInput(
            "corrupt", f"{name} is too large an image: scale it below 89 megapixels"
        ) from None
    except (OSError, ValueError, SyntaxError) as err:  # truncated or damaged data
        raise BadInput("corrupt", f"{name}: the image data is damaged ({err})") from None
    if img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info:
        paper = Image.new("RGBA", img.size, (255, 255, 255, 255))
        img = Image.alpha_composite(paper, img.convert("RGBA"))
    return img.convert("L")


def open_audio(source: bytes | Path, name: str) -> np.ndarray:
    """A file or upload -> float32 mono samples at 16 kHz (sonfolio.speech.audio.decode).

    Raises:
        BadInput: missing, not audio, or no samples.
    """
    data = _read(source, name)
    try:
        return decode(data)
    except AudioError as err:
        if err.reason == "empty_audio":
            raise BadInput("empty", f"{name} holds no audio samples") from None
        raise BadInput(
            "unsupported", f"{name} is not audio that can be decoded: send a {AUDIO_FORMATS} file"
        ) from None
