"""16 kHz audio of any length read into text: cut into chunks that fit the model's window
(sonfolio.speech.decode.chunks), chunks without speech left undecoded
(sonfolio.speech.decode.voice), the rest decoded by a model variant in batches and joined.
What `sonfolio transcribe` and the service run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
    call, its decoding loops kept once (`infer.audio.max_repeats`).

    Pieces of similar length share a batch (a batch decodes until its longest text ends).
    Where the variant decodes apart from encoding (the ORT loop), `infer.decode_workers`
    batches at a time (no more than the variant's threads) are encoded one after the other
    on every core, then decoded side by side, one thread each: a decoder step at batch 8 is
    too small to split over cores (a second thread slowed the speech eval's batch 16 down),
    so one batch alone left a core idle for most of a long recording's time
    (benchmarks.longform measures it)."""
    order = sorted(range(len(pieces)), key=lambda i: pieces[i].size)
    parts = [order[part] for part in slices(len(order), cfg.batch_size)]

    def features(part: list[int]) -> np.ndarray:
        batch = [pieces[i] for i in part]
        return variant.processor(batch, sampling_rate=SAMPLE_RATE, return_tensors="np")[
            "input_features"
        ]

    workers = min(cfg.decode_workers, len(parts))
    if variant.decodes_apart and (workers := min(workers, variant.loop.threads)) > 1:
        texts = _side_by_side(variant, parts, features, workers, cfg.speech_max_tokens)
    else:
        texts = [variant.generate(features(part), cfg.speech_max_tokens) for part in parts]
    said = [""] * len(pieces)
    for part, read in zip(parts, texts, strict=True):
        for i, text in zip(part, read, strict=True):
            said[i] = trim_repeats(text.strip(), cfg.audio.max_repeats)
    return said


def _side_by_side(
    variant: Variant,
    parts: list[list[int]],
    features: Callable[[list[int]], np.ndarray],
    workers: int,
    max_tokens: int,
) -> list[list[str]]:
    """Each part's texts: `workers` parts a round, encoded in turn, decoded at once."""
    texts: list[list[str]] = []
    with ThreadPoolExecutor(workers, thread_name_prefix="decode") as pool:
        for start in range(0, len(parts), workers):
            group = parts[start : start + workers]
            encoded = [variant.encode(features(part)) for part in group]
            ids = pool.map(
                lambda job: variant.decode(job[0], len(job[1]), max_tokens),
                zip(encoded, group, strict=True),
            )
            texts += [variant.tokenizer.batch_decode(row, skip_special_tokens=True) for row in ids]
    return texts


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
    found = iter(read_pieces(variant, [audio[c.start : c.end] for c in spoken], cfg))
    texts = [next(found) if h else "" for h in heard]
    out = [
        ChunkText(c.start / SAMPLE_RATE, c.end / SAMPLE_RATE, t, not h)
        for c, t, h in zip(chunks, texts, heard, strict=True)
    ]
    return out, join_texts(texts, [c.overlaps for c in chunks])
