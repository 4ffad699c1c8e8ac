"""Files and uploads -> what the models read, or an error that names the input and the fix.

Content is checked by decoding it, never by the name or the declared type: Pillow recognises an
image by its magic bytes, libsndfile an audio file by its header. The service turns the error's
`kind` into an HTTP status (unsupported: 415, too_large: 413, limit: 422, else 400); the CLI
exits with 2. Size limits are checked from the header, before anything is decoded.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from sonfolio.infer.audio_file import AudioRefused, decode_bounded
from sonfolio.limits import BadInput
from sonfolio.score.decode.image_file import IMAGE_FORMATS, open_image, to_gray

if TYPE_CHECKING:
    from sonfolio.config.infer import AudioLimits

log = logging.getLogger(__name__)

AUDIO_FORMATS = "WAV, FLAC, OGG or MP3"


def display_name(name: str) -> str:
    """A file name as text that is safe to print, log and write as UTF-8: bytes that are not
    UTF-8 (a Linux name is bytes, read into str with surrogate escapes) as \\xNN, and control
    characters (a terminal's escape sequences, newlines) as \\xNN too, so a name can neither
    break an output file's encoding nor drive the terminal it is logged to."""
    try:
        text = os.fsencode(name).decode("utf-8", errors="backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no file system name decodes to
        text = name.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def open_audio(source: bytes | Path, name: str, limits: AudioLimits) -> np.ndarray:
    """A file or upload -> float32 mono samples at 16 kHz, within `infer.speech.audio_limits`.

    The header is checked before any sample is decoded, and the samples are read and
    resampled in blocks (sonfolio.infer.audio_file): memory stays bounded by the 16 kHz output,
    whatever the header claims. A file on disk is read as it is decoded, never whole.

    Raises:
        BadInput: missing, not audio ("unsupported"), no samples ("empty"), longer than
            max_audio_s ("too_large"), or a sample rate or channel count outside the limits
            ("limit"); the message names the limit and the param to raise.
    """
    if isinstance(source, Path):
        if not source.is_file():
            raise BadInput("missing", f"{name}: no such file (check the path)")
        try:
            stream: IO[bytes] = source.open("rb")
        except OSError as err:
            raise BadInput(
                "missing", f"{name}: cannot be read ({err.strerror}): check its permissions"
            ) from None
    else:
        stream = io.BytesIO(source)
    with stream:
        if stream.seek(0, io.SEEK_END) == 0:
            raise BadInput("empty", f"{name} is empty (0 bytes): send a {AUDIO_FORMATS} file")
        stream.seek(0)
        try:
            return decode_bounded(stream, name, limits)
        except AudioRefused as err:
            if err.reason == "unreadable":
                raise BadInput(
                    "unsupported",
                    f"{name} is not audio that can be decoded ({err}): send a {AUDIO_FORMATS} file",
                ) from None
            raise BadInput(_AUDIO_KIND[err.reason], str(err)) from None


# AudioRefused.reason -> BadInput.kind (the service's HTTP status: sonfolio/serve.py STATUS)
_AUDIO_KIND = {
    "corrupt": "corrupt",
    "too_long": "too_large",
    "sample_rate": "limit",
    "channels": "limit",
    "empty": "empty",
}


__all__ = [
    "AUDIO_FORMATS",
    "IMAGE_FORMATS",
    "BadInput",
    "display_name",
    "open_audio",
    "open_image",
    "to_gray",
]
