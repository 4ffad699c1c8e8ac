"""A loaded model variant -> texts: staff systems read from images, speech from audio.

Preprocessing is the training data's: a system image has its long side resized to the model's
canvas width with Lanczos (sonfolio.score.render.finish_image), then goes through
sonfolio.score.batches.load_image / to_pixel_values; audio is 16 kHz mono
(sonfolio.speech.audio.decode) turned into log-mel features by the model's own feature extractor.
Decoding is greedy, or for staff systems constrained by the canonical grammar with
`infer.constrained` (sonfolio.variants.Variant.generate).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from sonfolio import tracks
from sonfolio.infer.audio import join_texts, plan_chunks, processor_window_s
from sonfolio.infer.page import Box, deskew, find_staves, split_page
from sonfolio.infer.voice import has_speech
from sonfolio.score.batches import load_image, to_pixel_values
from sonfolio.score.canonical import CanonicalError, validate
from sonfolio.score.constrained import Carry, next_time
from sonfolio.speech.audio import SAMPLE_RATE
from sonfolio.variants import Variant, VariantError, load

if TYPE_CHECKING:
    from sonfolio.config.infer import Infer
    from sonfolio.config.paths import Paths

log = logging.getLogger(__name__)

TRACK_FLAG = {"score": "--score-model", "speech": "--speech-model"}


class ModelUnavailable(ValueError):
    """A model folder that cannot be used for the operation; the message says what to do."""


def default_model(track: str, paths: Paths, variant: str) -> tuple[Path, str]:
    """The folder a command loads when none is given, and why that one."""
    export, fp32 = paths.track(track).export, paths.track(track).model
    if (export / variant).is_dir():
        return export / variant, f"the {variant} ONNX variant (infer.variant)"
    return fp32, f"the FP32 model: {export / variant} is absent (run the export stage for it)"


def load_model(folder: Path, track: str, threads: int | None, device: str) -> Variant:
    """Load `folder` and check that it is a `track` model.

    Raises:
        ModelUnavailable: the folder is missing or broken, or holds the other track's model.
    """
    try:
        variant = load(folder, threads=threads, device=device)
    except VariantError as err:
        raise ModelUnavailable(str(err)) from None
    if variant.track != track:
        raise ModelUnavailable(
            f"{folder} holds a {variant.track} model; this needs a {track} model: pass its "
            f"folder with --model (serve: {TRACK_FLAG[track]})"
        )
    return variant


def check_fit(variant: Variant, cfg: Infer) -> None:
    """Settings that cannot work with this model fail when it loads, not on the first request.

    Raises:
        ModelUnavailable: the track's definition finds a setting that cannot work (speech:
            infer.audio's cuts do not fit the model's window).
    """
    definition = tracks.get(variant.track)
    try:
        definition.check_infer(variant.processor, cfg)
    except ValueError as err:
        raise ModelUnavailable(f"{variant.folder}: {err}") from None


def _batches(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


@dataclass(frozen=True)
class SystemText:
    """One staff system read from an image."""

    index: int  # 1-based, top to bottom
    box: Box  # where it lies in the image
    text: str
    problem: str | None  # why the text is not canonical LilyPond; None when it is
    time: str | None = None  # the time signature in force before it (the system above's)

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "box": self.box.as_list(),
            "text": self.text,
            "canonical": self.problem is None,
            "problem": self.problem,
            "time": self.time,
        }


@dataclass(frozen=True)
class Reading:
    """An image's systems, top to bottom. `deskew_deg`: the page was turned by that much
    (counter-clockwise) before it was cut, and the boxes lie in the turned image; 0: as given."""

    systems: list[SystemText]
    deskew_deg: float


def system_boxes(
    image: Image.Image, page: bool | None, cfg: Infer
) -> tuple[Image.Image, list[Box], float]:
    """Where the systems lie: in the whole image (page False), in the straightened page split
    into systems (True), or, with None, the latter only when it has more than one staff.
    Returns the image the boxes refer to, the boxes, and the turn applied."""
    whole = (image, [Box(0, 0, image.width, image.height)], 0.0)
    if page is False:
        return whole
    level, angle = deskew(image, cfg.page.max_skew_deg, cfg.image)
    gray = np.asarray(level)
    if page is None:
        staves = len(find_staves(gray, cfg.page))
        log.info("%d staves found: %s", staves, "a page" if staves > 1 else "one system")
        if staves <= 1:
            return whole
    if angle:
        log.info("page straightened by %.1f degrees", angle)
    return level, split_page(gray, cfg.page), angle


def pixel_values(images: Sequence[Image.Image], processor: Any) -> torch.Tensor:
    """Grey system images -> (B, 1, H, W) model input, as the training images were made.

    `processor` is the model's ViTImageProcessor: its size is the canvas (height, width)."""
    height, width = processor.size["height"], processor.size["width"]
    arrays = []
    for img in images:
        scale = width / max(img.size)
        img = img.resize(
            (max(1, round(img.width * scale)), max(1, round(img.height * scale))),
            Image.Resampling.LANCZOS,
        )
        buf = io.BytesIO()
        img.save(buf, format="PNG")  # lossless, as the stored training images
        buf.seek(0)
        arrays.append(load_image(buf, height, width))  # PIL opens a file object as a path
    return to_pixel_values(np.stack(arrays))


def _problem(text: str, time: str | None = None) -> str | None:
    try:
        validate(text, time)
    except CanonicalError as err:
        return str(err)
    return None


def read_image(variant: Variant, image: Image.Image, page: bool | None, cfg: Infer) -> Reading:
    """Every staff system of a grey image, read into LilyPond text.

    Systems are read top to bottom, each in the time signature the one above leaves in force
    (canonical.time_after; the first: none known), which a system that prints none needs for
    its bar checks; with `infer.constrained` the decoding itself keeps to the grammar
    (sonfolio.score.constrained), else it is greedy and only checked.
    """
    source, boxes, angle = system_boxes(image, page, cfg)
    if not boxes:
        return Reading([], angle)
    crops = [source.crop((b.left, b.top, b.right, b.bottom)) for b in boxes]
    pixels = pixel_values(crops, variant.processor)
    texts: list[str] = []
    times: list[str | None] = []  # the time in force before each system
    time: str | None = None  # in force before the next system to decode
    for part in _batches(len(crops), cfg.batch_size):
        if cfg.constrained:
            batch = variant.generate(
                pixels[part], cfg.score_max_tokens, times=Carry(time), constrained=True
            )
        else:
            batch = variant.generate(pixels[part], cfg.score_max_tokens)
        for text in batch:
            texts.append(text.strip())
            times.append(time)
            time = next_time(texts[-1], time)
    systems = [
        SystemText(i + 1, box, text, _problem(text, t), t)
        for i, (box, text, t) in enumerate(zip(boxes, texts, times, strict=True))
    ]
    return Reading(systems, angle)


@dataclass(frozen=True)
class ChunkText:
    """One window of audio and what the model heard in it."""

    start_s: float
    end_s: float
    text: str
    no_speech: bool = False  # no speech heard (sonfolio.infer.voice): the text is empty

    def as_dict(self) -> dict:
        return {
            "start": round(self.start_s, 3),
            "end": round(self.end_s, 3),
            "text": self.text,
            "no_speech": self.no_speech,
        }


def transcribe(variant: Variant, audio: np.ndarray, cfg: Infer) -> tuple[list[ChunkText], str]:
    """16 kHz mono float audio -> (each chunk's text, the whole text).

    With `infer.no_speech.check`, a chunk in which no speech is heard is not decoded: its text
    is empty and flagged `no_speech`, where Whisper would invent a sentence."""
    fe = variant.processor
    chunks = plan_chunks(audio, SAMPLE_RATE, processor_window_s(fe), cfg.audio)
    if len(chunks) > 1:
        log.info("%.1f s of audio in %d chunks", audio.size / SAMPLE_RATE, len(chunks))
    check = cfg.no_speech.check
    heard = [not check or has_speech(audio[c.start : c.end], cfg.no_speech) for c in chunks]
    if not all(heard):
        log.info("%d of %d chunks hold no speech (infer.no_speech)", heard.count(False), len(heard))
    spoken = [c for c, h in zip(chunks, heard, strict=True) if h]
    decoded: list[str] = []
    for part in _batches(len(spoken), cfg.batch_size):
        clips = [audio[c.start : c.end] for c in spoken[part]]
        feats = fe(clips, sampling_rate=SAMPLE_RATE, return_tensors="pt")["input_features"]
        decoded += [t.strip() for t in variant.generate(feats, cfg.speech_max_tokens)]
    found = iter(decoded)
    texts = [next(found) if h else "" for h in heard]
    out = [
        ChunkText(c.start / SAMPLE_RATE, c.end / SAMPLE_RATE, t, not h)
        for c, t, h in zip(chunks, texts, heard, strict=True)
    ]
    return out, join_texts(texts, [c.overlaps for c in chunks])
