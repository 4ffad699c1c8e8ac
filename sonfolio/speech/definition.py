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

    # Compared with the reference variant (delta_<key>; a positive wer delta is a loss) and
    # written to quality.csv, with eval_csv_extra, for `dvc plots`.
    eval_delta_keys = ("wer", "cer")
    eval_csv_extra = "clips_per_s"
    # How the report shows a variant's samples (sonfolio.report.SAMPLE_VIEWS): the worst clips
    # the eval names in its metrics, with their audio.
    eval_samples = "clips"

    def eval_tool(self, params):
        """None: WER and CER are computed in-process, with no outside tool."""
        return None

    def eval_inputs(self, variant, rows, data):
        """(B, mel bins, frames) log-mel features of `rows`' clips under `data`, for `variant`."""
        from sonfolio.speech.evaluate import inputs

        return inputs(variant, rows, data)

    def eval_scorer(self, cfg, data, tool, work):
        """Scores each variant's transcripts (WER and CER after normalisation, per split and
        voice) and writes the worst clips with their audio paths; no tool, no scratch folder."""
        from sonfolio.speech.evaluate import Scorer

        return Scorer(cfg, data)


TRACK = SpeechTrack()
