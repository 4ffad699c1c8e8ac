"""The params section `infer`: `sonfolio read`, `transcribe` and the service (`serve` is
sonfolio/config/serve.py's)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from sonfolio.config.base import Positive, Strict
from sonfolio.config.page import PageSplit


class ImageLimits(Strict):
    """What an image may hold (sonfolio/infer/inputs.py, page.py): checked from the header
    before any pixel is decoded, and again after the page is straightened (docs/security.md)."""

    # Pixels, width x height. Pillow's own decompression-bomb error (~179 M pixels) stops larger
    # images whatever this says, so a higher value would be a promise the reader cannot keep.
    max_pixels: Annotated[int, Field(ge=1, le=178_000_000)]
    max_aspect: Annotated[float, Field(ge=1.0)]  # long side / short side


class AudioChunks(Strict):
    """Cutting long audio into windows the speech model takes (sonfolio/speech/decode/chunks.py)."""

    search_s: Annotated[float, Field(gt=0.0)]  # the quietest point this close to the limit
    silence_db: Annotated[float, Field(lt=0.0)]  # dB below the clip's loudest frame
    overlap_s: Annotated[float, Field(ge=0.0)]  # chunks cut outside a silence overlap this much
    max_repeats: Annotated[int, Field(ge=0)]  # a word group repeated more: a loop, kept once
    pause_s: Annotated[float, Field(ge=0.0, le=10.0)]  # a silence this long ends a chunk (0: none)


class AudioLimits(Strict):
    """What an audio file may hold (sonfolio/infer/audio_file.py): checked from the header
    before any sample is decoded, then counted while read (docs/security.md)."""

    max_audio_s: Annotated[float, Field(gt=0.0)]  # duration, read from the header, then counted
    min_sample_rate: Annotated[int, Field(ge=1)]  # Hz; below telephone rates speech is lost
    max_sample_rate: Annotated[int, Field(ge=1)]  # Hz
    max_channels: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _rate_range(self) -> AudioLimits:
        if self.min_sample_rate > self.max_sample_rate:
            raise ValueError(
                f"min_sample_rate {self.min_sample_rate} is above max_sample_rate "
                f"{self.max_sample_rate}: lower the first or raise the second"
            )
        return self


class NoSpeech(Strict):
    """Audio with no speech in it gives an empty, flagged text instead of an invented sentence
    (sonfolio/speech/decode/voice.py). Only `transcribe` and the service apply it, never the
    eval."""

    check: bool  # off: every chunk goes to the model, as before
    floor_dbfs: Annotated[float, Field(lt=0.0)]  # quieter than this (loudest 25 ms): silence
    vad_threshold: Annotated[float, Field(gt=0.0, lt=1.0)]  # Silero VAD speech probability
    min_speech_s: Annotated[float, Field(ge=0.0)]  # less speech than this in a chunk: none


class ScoreReading(Strict):
    """`infer.score`: how `sonfolio read`, the service and eval@score read images of music. Its
    own section, so that an edit here reruns eval@score and never eval@speech."""

    max_tokens: Positive  # greedy decoding limit per system
    # decode staff systems under the canonical grammar (sonfolio.score.decode)
    constrained: bool
    page: PageSplit
    # each system cut from a page is straightened again on its own, within this many degrees:
    # a photo's perspective tilts the lines of one page by different angles (0: never), when
    # its own tilt is at least system_skew_min_deg
    system_skew_deg: Annotated[float, Field(ge=0.0, le=10.0)]
    system_skew_min_deg: Annotated[float, Field(ge=0.0, le=10.0)]
    image: ImageLimits

    @model_validator(mode="after")
    def _system_skew_range(self) -> ScoreReading:
        if self.system_skew_deg and self.system_skew_min_deg > self.system_skew_deg:
            raise ValueError(
                f"system_skew_min_deg {self.system_skew_min_deg} is above system_skew_deg "
                f"{self.system_skew_deg}: no system would ever be straightened; lower the first, "
                "or set system_skew_deg to 0 to turn it off"
            )
        return self


class SpeechReading(Strict):
    """`infer.speech`: how `sonfolio transcribe`, the service and eval@speech's real voices read
    audio. Its own section, so that an edit here reruns eval@speech and never eval@score."""

    max_tokens: Positive  # greedy decoding limit per audio chunk
    # batches of a long recording decoded at once, a thread each (ORT loop variants)
    decode_workers: Positive
    audio: AudioChunks
    audio_limits: AudioLimits
    no_speech: NoSpeech


# Keys of `infer` before its track sections (changelog: docs/architecture.md), named in the
# error so that an old params.yaml says where its key went.
_MOVED_INFER = {
    "score_max_tokens": "infer.score.max_tokens",
    "speech_max_tokens": "infer.speech.max_tokens",
    **{k: f"infer.score.{k}" for k in ScoreReading.model_fields if k != "max_tokens"},
    **{k: f"infer.speech.{k}" for k in SpeechReading.model_fields if k != "max_tokens"},
}


class Infer(Strict):
    """`sonfolio read`, `sonfolio transcribe` and the service (docs/inference.md): what both
    tracks read with, then each track's own section (eval@<track> lists only its own)."""

    variant: Annotated[str, Field(min_length=1)]  # default exported variant folder name
    batch_size: Positive  # systems or chunks per generate call
    score: ScoreReading
    speech: SpeechReading

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            moved = [f"infer.{k} is now {_MOVED_INFER[k]}" for k in raw if k in _MOVED_INFER]
            if moved:
                raise ValueError("; ".join(moved) + " (params.yaml: one section per track)")
        return raw
