"""The app's model: which folder a command loads, loading it as a model of the track asked
for, and the settings checked against it; the reading itself is the tracks' own
(sonfolio.score.decode.read for staff systems, sonfolio.speech.decode.transcribe for audio).

Preprocessing is the training data's: a system image has its long side resized to the model's
canvas width with Lanczos, then goes through sonfolio.score.model.batches; audio is 16 kHz
mono turned into log-mel features by the model's own feature extractor. Decoding is greedy,
or for staff systems constrained by the canonical grammar with `infer.score.constrained`
(sonfolio.variants.Variant.generate).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sonfolio import tracks
from sonfolio.variants import Variant, VariantError, load

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

    from sonfolio.config.infer import Infer
    from sonfolio.config.paths import Paths
    from sonfolio.score.decode.read import Reading, SystemText  # noqa: F401 (named below)
    from sonfolio.speech.decode.transcribe import ChunkText

log = logging.getLogger(__name__)


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
            f"folder with --model (serve: {tracks.face(track, 'infer').model_flag})"
        )
    return variant


def check_fit(variant: Variant, cfg: Infer) -> None:
    """Settings that cannot work with this model fail when it loads, not on the first request.

    Raises:
        ModelUnavailable: the track's infer face finds a setting that cannot work (speech:
            infer.speech.audio's cuts do not fit the model's window).
    """
    face = tracks.face(variant.track, "infer")
    try:
        face.check_infer(variant.processor, cfg)
    except ValueError as err:
        raise ModelUnavailable(f"{variant.folder}: {err}") from None


# What the app runs per track (score: sonfolio.score.decode.read; speech:
# sonfolio.speech.decode.transcribe), named here for the CLI and the service. Imported when
# called: `sonfolio transcribe` starts without the score track's reading code (~0.2 s).
def read_image(variant: Variant, image: Image.Image, page: bool | None, cfg: Infer) -> Reading:
    """Every staff system of a grey image, read (sonfolio.score.decode.read.read_image)."""
    from sonfolio.score.decode.read import read_image as read

    return read(variant, image, page, cfg)


def transcribe(variant: Variant, audio: np.ndarray, cfg: Infer) -> tuple[list[ChunkText], str]:
    """16 kHz audio read into text (sonfolio.speech.decode.transcribe.transcribe)."""
    from sonfolio.speech.decode.transcribe import transcribe as hear

    return hear(variant, audio, cfg)
