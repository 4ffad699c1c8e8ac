"""The speech track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("speech"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from sonfolio.config import SpeechData, SpeechTokenizer
    from sonfolio.tokenizer import BuiltTokenizer


class SpeechTrack:
    """The speech track."""

    name = "speech"

    # --- data ---

    data_file = "audio"  # the manifest column naming each row's file (the step hashes it)
    data_items = "utterances"  # what a manifest row is, in the metrics' `utterances_per_s`

    def build_data(
        self, cfg: SpeechData, download_cache: Path, out: Path
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The speech dataset written into `out`: its manifest rows and its stats.

        French clips (16 kHz mono WAV) spoken by espeak-ng or read from a corpus; rows (audio,
        text, text_norm, duration, speaker, split) as sonfolio.speech.dataset.build makes
        them. `download_cache` is unused: a hub corpus is cached by `datasets` itself.
        """
        from sonfolio.speech.dataset import build

        return build(cfg, out)

    # --- tokenizer ---

    text_columns = ("text", "text_norm")  # as written, and as WER reads it: both round-trip

    def build_tokenizer(
        self, cfg: SpeechTokenizer, train: list[str], rows: list[dict[str, Any]]
    ) -> BuiltTokenizer:
        """Whisper's tokenizer and feature extractor, saved together in one folder.

        A base model's as they are (not exact: a round-trip failure is only logged), or a BPE
        on the `train` transcripts and features built from `cfg`; sonfolio.speech.processor.
        """
        from sonfolio.speech.processor import build_processor

        return build_processor(cfg, train, rows)

    # --- train ---

    # --- qat ---

    # --- export ---

    # --- bench ---

    # --- eval ---


TRACK = SpeechTrack()
