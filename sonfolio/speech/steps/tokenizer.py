"""tokenizer@speech: Whisper's tokenizer and feature extractor (sonfolio.faces.TokenizerFace)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sonfolio.config.tokenizer import SpeechTokenizer
    from sonfolio.tokenizer import BuiltTokenizer


class SpeechTokenizerFace:
    name = "speech"
    text_columns = ("text", "text_norm")  # as written, and as WER reads it: both round-trip

    def build_tokenizer(
        self, cfg: SpeechTokenizer, train: list[str], rows: list[dict[str, Any]]
    ) -> BuiltTokenizer:
        """Whisper's tokenizer and feature extractor, saved together in one folder.

        A base model's as they are (not exact: a round-trip failure is only logged), or a BPE
        on the `train` transcripts and features built from `cfg`;
        sonfolio.speech.model.processor.
        """
        from sonfolio.speech.model.processor import build_processor

        return build_processor(cfg, train, rows)


FACE = SpeechTokenizerFace()
