"""The service's budget: what one upload asks for, estimated before the work is done, and how
the work is shared between requests.

- The work an upload asks for is refused past `serve.max_staves` (staves found on an image) or
  `serve.max_audio_samples` (samples to decode, from the audio header), with the figure (413).
- The memory it holds while decoded and read is estimated from its header: `DecodeSlots`
  shares `serve.decode_memory_mb` out between `serve.max_concurrent_decodes` uploads.
- A model is shared call by call (`Shared`, `Turns`): a long request's calls and the others'
  run in turn, in the order they were asked for.

Why these measures: every staff is scaled to the model's canvas before it is read, so each one
costs the same, whatever its width, up to `infer.score.max_tokens` decoding steps (a 58 KB PNG
of 29 staves held a decode slot for 126 s); decoding audio costs its source samples, seconds x
channels x rate (599 s of 8 channels at 192 kHz, a 252 KB FLAC, is 920 M samples and ~30 s of
decoding before the model hears any). The pixels are bounded already by
`infer.score.image.max_pixels`.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import threading
import warnings
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import soundfile
from PIL import Image

from sonfolio.infer.audio_file import UNKNOWN_FRAMES, AudioRefused, check_header
from sonfolio.limits import BadInput, check_image_size
from sonfolio.score.common.page import deskew, find_staves
from sonfolio.score.decode.image_file import PILLOW_FORMATS
from sonfolio.score.decode.read import Reading, read_image
from sonfolio.speech.common.audio import SAMPLE_RATE

if TYPE_CHECKING:
    from sonfolio.config.infer import AudioLimits, ImageLimits, Infer
    from sonfolio.config.serve import Serve
    from sonfolio.variants import Variant

log = logging.getLogger(__name__)

MB = 1024 * 1024

# A page decoded, straightened and cut: 256 MB over the idle server for the largest page the
# limits admit, 40 M pixels (benchmarks/hostile_uploads.py, largest_allowed_page).
BYTES_PER_PIXEL = 7
# The 16 kHz float32 samples, twice: the decoded clip and the chunks' copies and features.
AUDIO_BYTES_PER_S = 2 * 4 * SAMPLE_RATE
# Decoding: a second of source frames read at once (4 bytes a channel) and a block of ~11 s
# resampled through an FFT (~34 bytes a frame): tracemalloc's peak less the output was 70 MB for
# 8 channels at 192 kHz, 18 MB for stereo at 48 kHz.
BLOCK_BYTES_PER_FRAME = 400


def image_memory(data: bytes, name: str, limits: ImageLimits) -> int:
    """Bytes an image upload holds while it is read: its header's pixels x BYTES_PER_PIXEL, and
    the upload itself; refused at once if the header is over `infer.score.image`'s limits.

    What is no image costs its bytes alone here: `open_image` then says what is wrong with it.

    Raises:
        BadInput: the header is over infer.score.image.max_pixels or max_aspect.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=PILLOW_FORMATS) as img:  # the header only
                size = img.size
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        return len(data)
    check_image_size(size, name, limits)
    return size[0] * size[1] * BYTES_PER_PIXEL + len(data)


@dataclass(frozen=True)
class AudioSize:
    """What an audio header says: how much there is to decode."""

    frames: int
    channels: int
    rate: int  # Hz

    @property
    def samples(self) -> int:
        return self.frames * self.channels

    @property
    def memory(self) -> int:
        """Bytes it holds while decoded and read (the upload itself aside)."""
        seconds = self.frames / self.rate
        return round(seconds * AUDIO_BYTES_PER_S) + self.rate * (
            4 * self.channels + BLOCK_BYTES_PER_FRAME
        )


def audio_size(data: bytes, name: str, limits: AudioLimits) -> AudioSize | None:
    """The header's length, channels and rate; None where `open_audio` will refuse the file
    before decoding anything (not audio, no length, or over `infer.speech.audio_limits`), so that
    its message, naming that limit, is the one given."""
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            check_header(f, name, limits)
            size = AudioSize(f.frames, f.channels, f.samplerate)
    except (soundfile.LibsndfileError, RuntimeError, AudioRefused):
        return None
    return None if size.frames >= UNKNOWN_FRAMES else size


def check_audio_work(size: AudioSize, name: str, max_samples: int) -> None:
    """Refuse audio with more samples to decode than `serve.max_audio_samples`.

    Raises:
        BadInput: "too_large", with the figure and the param to raise.
    """
    if size.samples <= max_samples:
        return
    seconds = f"{size.frames / size.rate:,.1f}".removesuffix(".0")
    raise BadInput(
        "too_large",
        f"{name} holds {seconds} s x {size.channels} channels at {size.rate:,} Hz = "
        f"{size.samples:,} samples to decode; serve.max_audio_samples is {max_samples:,}: send "
        "it with fewer channels or at a lower rate (speech needs one channel at 16 kHz), or "
        "raise serve.max_audio_samples in params.yaml",
    )


def read_page(
    variant: Variant, image: Image.Image, page: bool | None, cfg: Infer, max_staves: int, name: str
) -> Reading:
    """`read_image`, with the staves counted on the straightened page before any is read.

    The count is `read_image`'s own first steps (straighten, find the staves); the straightened
    page then goes to `read_image` with straightening off, so the page is turned once and the
    reading is the same as `read_image(variant, image, page, cfg)`'s.

    Raises:
        BadInput: "too_large", more staves than `max_staves` (serve.max_staves), with the count.
    """
    if page is False:  # the whole image as one system
        return read_image(variant, image, page, cfg)
    score = cfg.score
    level, angle = deskew(image, score.page.max_skew_deg, score.image)
    staves = len(find_staves(np.asarray(level), score.page))
    if page is None and staves <= 1:
        log.info("%d staves found: one system", staves)
        return read_image(variant, image, False, cfg)
    if staves > max_staves:
        raise BadInput(
            "too_large",
            f"{name}: {staves} staves found, each one to read; serve.max_staves is "
            f"{max_staves}: send the page in parts, or raise serve.max_staves in params.yaml",
        )
    log.info("%d staves found: a page", staves)
    level_page = score.page.model_copy(update={"max_skew_deg": 0.0})
    level_cfg = cfg.model_copy(update={"score": score.model_copy(update={"page": level_page})})
    reading = read_image(variant, level, True, level_cfg)
    return dataclasses.replace(reading, deskew_deg=angle)


class Busy(RuntimeError):
    """No decode slot or memory freed in time: the service answers 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DecodeSlots:
    """`serve.max_concurrent_decodes` slots that share `serve.decode_memory_mb`: an upload
    takes a slot and its estimated memory (`image_memory`, `AudioSize.memory`) while it is
    decoded and read, and waits up to `serve.busy_timeout_s` for both. A small upload passes
    beside a large one; one estimated over the whole budget waits for all of it and runs
    alone. Uploads that fit go first (a large one may wait while small ones pass, up to the
    timeout)."""

    def __init__(self, cfg: Serve) -> None:
        self.cfg, self.memory = cfg, int(cfg.decode_memory_mb * MB)
        self._free_slots, self._free_memory = cfg.max_concurrent_decodes, self.memory
        self._changed = threading.Condition()

    def _busy(self, need: int) -> Busy:
        cfg = self.cfg
        if self._free_slots:
            why = (
                f"this upload needs ~{need / MB:,.0f} MB of the {cfg.decode_memory_mb:g} MB that "
                f"uploads being read share (serve.decode_memory_mb) and only "
                f"{self._free_memory / MB:,.0f} MB were free"
            )
        else:
            n = cfg.max_concurrent_decodes
            why = f"{n} uploads are being read (serve.max_concurrent_decodes) and none finished"
        return Busy(
            f"busy: {why} within {cfg.busy_timeout_s:g} s (serve.busy_timeout_s): retry later",
            retry_after_s=max(1, round(cfg.busy_timeout_s)),
        )

    @contextmanager
    def take(self, memory: int = 0) -> Iterator[None]:
        """A slot and `memory` bytes (at most the whole budget) while the block runs.

        Raises:
            Busy: they were not free within serve.busy_timeout_s (the service answers 503).
        """
        need = min(memory, self.memory)
        with self._changed:
            free = self._changed.wait_for(
                lambda: self._free_slots > 0 and self._free_memory >= need,
                timeout=self.cfg.busy_timeout_s,
            )
            if not free:
                raise self._busy(need)
            self._free_slots -= 1
            self._free_memory -= need
        try:
            yield
        finally:
            with self._changed:
                self._free_slots += 1
                self._free_memory += need
                self._changed.notify_all()


class Turns:
    """A lock handed over in the order it was asked for. `threading.Lock` favours the thread
    that released it, so a request reading many systems would take its next call before the
    requests that waited through the last one."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiting: deque[threading.Lock] = deque()
        self._held = False

    def __enter__(self) -> Turns:
        with self._guard:
            if not self._held:
                self._held = True
                return self
            ticket = threading.Lock()
            ticket.acquire()
            self._waiting.append(ticket)
        ticket.acquire()  # released by the holder as it hands the turn over
        return self

    def __exit__(self, *_: object) -> None:
        with self._guard:
            if self._waiting:
                self._waiting.popleft().release()  # still held: now by the next in line
            else:
                self._held = False


class Shared:
    """A loaded variant that requests take turns on, one `generate` call at a time (`Turns`);
    everything else is the variant's own. The service reads `serve.batch_size` systems or
    chunks a call, so between two calls of a long request the others' calls run."""

    def __init__(self, variant: Variant) -> None:
        self.variant, self.turns = variant, Turns()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.variant, name)

    def generate(self, *args: Any, **kwargs: Any) -> list[str]:
        with self.turns:
            return self.variant.generate(*args, **kwargs)
