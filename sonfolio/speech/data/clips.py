"""The speech dataset's records: a manifest row, a clip that was skipped, where a clip goes.

Shared by the manifest's bookkeeping (sonfolio.speech.data.dataset) and both sources that make
clips (synthetic, hub), which sonfolio.speech.data.dataset calls: kept apart so that no module
imports one that imports it back.
"""

from __future__ import annotations

from dataclasses import dataclass

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Utterance:
    """One row of the manifest."""

    audio: str
    text: str
    text_norm: str
    duration: float
    speaker: str
    split: str


@dataclass(frozen=True)
class Skip:
    """An input that gave no clip: which one (a file or an utterance id) and why."""

    item: str
    reason: str


def audio_path(split: str, index: int) -> str:
    """Where clip `index` of `split` is written, relative to the dataset folder."""
    return f"audio/{split}/{index:06d}.wav"
