"""Long audio -> chunks that fit the speech model's window, and their texts joined back.

The model hears a fixed window (the feature extractor's `chunk_length`, 8 s by default). A longer
clip is cut greedily: each chunk ends at the quietest 25 ms frame within `search_s` of the
window's end. When that frame is a silence (`silence_db` below the clip's loudest frame) the cut
falls between words and the next chunk starts there; otherwise a word may be cut in two, so the
next chunk starts `overlap_s` earlier and the words both chunks heard are kept once when the
texts are joined. Before that, a pause of at least `pause_s` inside the window ends the chunk
there: one utterance a chunk, as a VAD pipeline cuts (faster-whisper's batched one) and as the
fine-tuned model was trained, one sentence a clip (packing two sentences into a window, it read
the first and stopped: 31 more words dropped than faster-whisper's batched pipeline on 10
minutes of joined test clips).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sonfolio.config.infer import AudioChunks

FRAME_S = 0.025  # loudness frames: 25 ms, every 10 ms (the usual speech analysis frame)
HOP_S = 0.010
MIN_CHUNK_S = 1.0  # a pause closer than this to a chunk's start does not end the chunk
MAX_REPEAT_WORDS = 12  # the longest repeat looked for where two overlapping texts meet
MAX_LOOP_WORDS = 12  # the longest word group whose run `trim_repeats` takes for a loop
# a sentence's end glued to the next one's first word ("Xavier.Aujourd'hui"): Whisper's
# tokens after a full stop may lack the space
GLUED_SENTENCES = re.compile(r"([.!?])(?=[A-ZÀ-ÖØ-Ý][a-zà-öø-ÿ])")


@dataclass(frozen=True)
class Chunk:
    """Samples [start, end) of the clip; `overlaps` when it starts before the previous ended."""

    start: int
    end: int
    overlaps: bool


def frame_db(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """(n,) float -> (frames,) RMS loudness in dB of 25 ms frames every 10 ms."""
    frame, hop = round(FRAME_S * sample_rate), round(HOP_S * sample_rate)
    if audio.size < frame:
        return np.full(1, 20 * math.log10(float(np.sqrt(np.mean(audio**2))) + 1e-10))
    # Sums of squares from a running total: memory stays O(samples) for an hour of audio.
    total = np.concatenate([[0.0], np.cumsum(np.square(audio, dtype=np.float64))])
    starts = np.arange(0, audio.size - frame + 1, hop)
    energy = np.maximum(total[starts + frame] - total[starts], 0.0) / frame
    return 20 * np.log10(np.sqrt(energy) + 1e-10)


def processor_window_s(processor: Any) -> float:
    """The speech model's input window, in seconds (WhisperFeatureExtractor.n_samples)."""
    return processor.n_samples / processor.sampling_rate


def check_settings(window_s: float, cfg: AudioChunks) -> None:
    """Raises ValueError when search_s + overlap_s leave no progress within one window."""
    if cfg.search_s + cfg.overlap_s >= window_s:
        raise ValueError(
            f"infer.speech.audio.search_s + overlap_s = {cfg.search_s + cfg.overlap_s} s must be "
            f"shorter than the model's window ({window_s} s): lower them"
        )


def plan_chunks(
    audio: np.ndarray, sample_rate: int, window_s: float, cfg: AudioChunks
) -> list[Chunk]:
    """Cut `audio` (16 kHz mono float) into chunks of at most `window_s` seconds.

    Raises:
        ValueError: search_s + overlap_s leave no progress within one window.
    """
    n, window = audio.size, int(window_s * sample_rate)
    check_settings(window_s, cfg)
    if n <= window:
        return [Chunk(0, n, False)]
    search, overlap = int(cfg.search_s * sample_rate), int(cfg.overlap_s * sample_rate)
    db = frame_db(audio, sample_rate)
    loudest = float(db.max())
    frame, hop = round(FRAME_S * sample_rate), round(HOP_S * sample_rate)
    quiet_frames = db - loudest <= cfg.silence_db
    chunks: list[Chunk] = []
    start, overlaps = 0, False
    while True:
        end = min(start + window, n)
        pause = _pause(quiet_frames, start, end, cfg.pause_s, hop, frame) if cfg.pause_s else None
        if pause is not None:  # an utterance ends inside the window: the chunk ends with it
            chunks.append(Chunk(start, pause, overlaps))
            start, overlaps = pause, False
            continue
        if n - start <= window:
            break
        limit = start + window
        first = math.ceil((limit - search) / hop)  # frames wholly inside the search span
        last = (limit - frame) // hop
        quiet = db[first : last + 1]
        if quiet.size:
            # The latest of the quietest frames (within 1 dB): chunks as long as possible.
            k = first + int(np.flatnonzero(quiet <= quiet.min() + 1.0)[-1])
            cut, silent = k * hop + frame // 2, db[k] - loudest <= cfg.silence_db
        else:  # a search span shorter than one frame: cut at the limit
            cut, silent = limit, False
        chunks.append(Chunk(start, cut, overlaps))
        start, overlaps = (cut, False) if silent else (cut - overlap, True)
    chunks.append(Chunk(start, n, overlaps))
    return chunks


def _pause(
    quiet: np.ndarray, start: int, end: int, pause_s: float, hop: int, frame: int
) -> int | None:
    """The sample in the middle of the first pause (quiet frames, `hop` samples apart, for at
    least `pause_s`) that starts at least MIN_CHUNK_S after `start` and ends before `end` (so
    speech follows it within the window), or None."""
    need = max(1, math.ceil(pause_s / HOP_S))
    lo = math.ceil((start + MIN_CHUNK_S * hop / HOP_S) / hop)
    hi = min((end - frame) // hop, quiet.size - 1)
    if hi - lo < need:
        return None
    span = quiet[lo:hi].astype(np.int32)
    full = np.flatnonzero(np.convolve(span, np.ones(need, np.int32), "valid") == need)
    if not full.size:
        return None
    first = lo + int(full[0])
    last = first + need - 1
    while last + 1 < hi and quiet[last + 1]:
        last += 1
    if last + 1 >= hi:  # silence to the window's end: nothing follows it here
        return None
    return ((first + last) // 2) * hop + frame // 2


def _word_key(word: str) -> str:
    return re.sub(r"[^\w]", "", word.casefold())


def trim_repeats(text: str, max_repeats: int) -> str:
    """`text` with its decoding loops kept once: a run of one group of 1-4 words said more than
    `max_repeats` times in a row, or of a longer group (a clause, up to MAX_LOOP_WORDS words)
    said more than once (case and punctuation ignored). A greedy decoder that loses its place
    loops on a group until the token limit ("mille neuf cent cent cent ...", or a whole
    sentence again and again), which no speaker says. Sentences the decoder glued together
    ("Xavier.Aujourd'hui") are parted first. 0 keeps the text as it is. Written here because
    neither transformers nor ORT trim a loop from a text (no_repeat_ngram_size forbids every
    repeat while decoding, also the rightful ones)."""
    if not max_repeats:
        return text
    words = GLUED_SENTENCES.sub(r"\1 ", text).split()
    keys = [_word_key(w) for w in words]
    out: list[str] = []
    i = 0
    while i < len(words):
        for size in range(1, MAX_LOOP_WORDS + 1):
            group, times = keys[i : i + size], 1
            while keys[i + times * size : i + (times + 1) * size] == group:
                times += 1
            if len(group) == size and times > (max_repeats if size <= 4 else 1):
                out += words[i : i + size]
                i += times * size
                break
        else:
            out.append(words[i])
            i += 1
    return " ".join(out)


def join_texts(texts: list[str], overlaps: list[bool]) -> str:
    """Join chunk texts with a space; where a chunk overlaps the previous one, the longest run
    of words that ends the text so far and starts the chunk's (case and punctuation ignored)
    is kept once."""
    words: list[str] = []
    for text, overlapping in zip(texts, overlaps, strict=True):
        new = text.split()
        if overlapping:
            keys = [_word_key(w) for w in new]
            for size in range(min(MAX_REPEAT_WORDS, len(words), len(new)), 0, -1):
                if [_word_key(w) for w in words[-size:]] == keys[:size]:
                    new = new[size:]
                    break
        words += new
    return " ".join(words)
