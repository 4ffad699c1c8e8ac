"""The params sections `score_tokenizer` and `speech_tokenizer`, and what that stage reads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sonfolio.config.base import Strict
from sonfolio.config.sections import Sections


class ScoreTokenizer(Strict):
    """score_tokenizer: the BPE over canonical LilyPond."""

    vocab_size: Annotated[int, Field(ge=64, le=200_000)]
    min_frequency: Annotated[int, Field(ge=1)]
    model_max_length: Annotated[int, Field(ge=16)]


class SpeechTokenizer(Strict):
    """speech_tokenizer: a base model's tokenizer, or a BPE and log-mel features built here."""

    base_model: Annotated[str, Field(min_length=1)] | None  # null: BPE + features built here
    vocab_size: Annotated[int, Field(ge=300, le=200_000)]  # > 256 bytes + special tokens
    min_frequency: Annotated[int, Field(ge=1)]
    model_max_length: Annotated[int, Field(ge=16)]
    num_mel_bins: Literal[80, 128]
    chunk_length_s: Annotated[int, Field(ge=1, le=30)]  # the model's input window, seconds
    language: str | None  # a Whisper tokenizer's language token (fr); null: the base's own


class TokenizerParams(Sections):
    """What stage tokenizer reads: `<track>_tokenizer`."""

    score_tokenizer: ScoreTokenizer
    speech_tokenizer: SpeechTokenizer
