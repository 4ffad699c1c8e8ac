"""16 kHz audio of any length read into text: cut into chunks that fit the model's window
(sonfolio.speech.decode.chunks), chunks without speech left undecoded
(sonfolio.speech.decode.voice), the rest decoded by a model variant in batches and joined.
What `sonfolio transcribe` and the service run."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sonfolio.parallel import slices
from sonfolio.speech.common.audio import SAMPLE_RATE
from sonfolio.speech.decode.chunks import (
    join_texts,
    plan_chunks,
    processor_window_s,
    trim_repeats,
)
from sonfolio.speech.decode.voice import has_speech

if TYPE_CHECKING:
    from sonfolio.config.infer import Infer
    from sonfolio.variants import Variant

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChunkText:
    """One window of audio and what the model heard in it."""

    start_s: float
    end_s: float
    text: str
    no_speech: bool = False  # no speech heard (sonfolio.speech.decode.voice): the text is empty

    def as_dict(self) -> dict:
        return {
            "start": round(self.start_s, 3),
            "end": round(self.end_s, 3),
            "text": self.text,
            "no_speech": self.no_speech,
        }


def read_pieces(variant: Variant, pieces: list[np.ndarray], cfg: Infer) -> list[str]:
    """Each piece of audio (no longer than the window) read by `variant`, `cfg.batch_size` a
    call, its decoding loops kept once (`infer.speech.audio.max_repeats`).

    Pieces of similar length share a batch (a batch decodes until its longest text ends);
    `infer.speech.decode_workers` batches are decoded side by side (Variant.generate_batches),
    or one batch alone left a core idle for most of a long recording's time
    (benchmarks.longform measures it)."""
    order = sorted(range(len(pieces)), key=lambda i: pieces[i].size)
    parts = [order[part] for part in slices(len(order), cfg.batch_size)]

    def features(part: list[int]) -> np.ndarray:
        batch = [pieces[i] for i in part]
        return variant.processor(batch, sampling_rate=SAMPLE_RATE, return_tensors="np")[
            "input_features"
        ]

    batches = (features(part) for part in parts)
    texts = variant.generate_batches(batches, cfg.speech.max_tokens, cfg.speech.decode_workers)
    said = [""] * len(pieces)
    for part, read in zip(parts, texts, strict=True):
        for i, text in zip(part, read, strict=True):
            said[i] = trim_repeats(text.strip(), cfg.speech.audio.max_repeats)
    return said


def transcribe(variant: Variant, audio: np.ndarray, cfg: Infer) -> tuple[list[ChunkText], str]:
    """16 kHz mono float audio -> (each chunk's text, the whole text).

    With `infer.speech.no_speech.check`, a chunk in which no speech is heard is not decoded:
    its text is empty and flagged `no_speech`, where Whisper would invent a sentence."""
    fe = variant.processor
    chunks = plan_chunks(audio, SAMPLE_RATE, processor_window_s(fe), cfg.speech.audio)
    if len(chunks) > 1:
        log.info("%.1f s of audio in %d chunks", audio.size / SAMPLE_RATE, len(chunks))
    check = cfg.speech.no_speech.check
    heard = [not check or has_speech(audio[c.start : c.end], cfg.speech.no_speech) for c in chunks]
    if not all(heard):
        log.info(
            "%d of %d chunks hold no speech (infer.speech.no_speech)",
            heard.count(False),
            len(heard),
        )
    spoken = [c for c, h in zip(chunks, heard, strict=True) if h]
    found = iter(read_pieces(variant, [audio[c.start : c.end] for c in spoken], cfg))
    texts = [next(found) if h else "" for h in heard]
    out = [
        ChunkText(c.start / SAMPLE_RATE, c.end / SAMPLE_RATE, t, not h)
        for c, t, h in zip(chunks, texts, heard, strict=True)
    ]
    return out, join_texts(texts, [c.overlaps for c in chunks])
