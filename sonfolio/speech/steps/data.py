"""data@speech: French clips and their transcripts (sonfolio.faces.DataFace)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sonfolio.config.data import SpeechData
    from sonfolio.faces import BuiltData


class SpeechDataFace:
    name = "speech"
    data_file = "audio"  # the manifest column naming each row's file (the step hashes it)
    data_items = "utterances"  # what a manifest row is, in the metrics' `utterances_per_s`

    def build_data(self, cfg: SpeechData, download_cache: Path, out: Path) -> BuiltData:
        """The speech dataset written into `out`: its manifest rows and its stats.

        French clips (16 kHz mono WAV) spoken by espeak-ng or read from a corpus; rows (audio,
        text, text_norm, duration, speaker, split) as sonfolio.speech.data.dataset.build makes
        them (a hub corpus is cached by `datasets` itself). Beside them, under out/real/ and
        in no manifest row, the real voice that eval@speech alone reads
        (sonfolio.speech.data.real; its Debian packages fetched into `download_cache` when
        they are not installed); its stats under `real`.
        """
        from sonfolio.speech.data import real
        from sonfolio.speech.data.dataset import build

        rows, stats = build(cfg, out)
        stats["real"] = real.build(cfg.real, download_cache / "debian", out)
        return rows, stats


FACE = SpeechDataFace()
