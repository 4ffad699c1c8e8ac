"""Stage speech_data: French speech clips (16 kHz mono WAV) and their transcripts.

Run:    dvc repro speech_data      (or: python -m tasks.speech_data)
Reads:  params.yaml (speech_data, paths.track("speech").data, paths.metrics). With source: synthetic
        (the default, offline) nothing else: sentences are generated and spoken by espeak-ng.
        With source: hub, the corpus speech_data.hub.name (a hub id or a local folder).
Writes: ${paths.track("speech").data}/audio/<split>/NNNNNN.wav, ${paths.track("speech").data}/manifest.jsonl
        (audio, text, text_norm, duration, speaker, split), ${paths.metrics}/speech_data.json
        (utterances, hours and speakers per split, skipped clips by reason).

A clip that cannot be used (unreadable or empty audio, empty text, longer than
speech_data.max_duration_s) is skipped and counted by reason; past speech_data.max_skip_fraction
of all clips the stage fails and lists them. Nothing is left in place of the output on failure.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sonfolio.config import SpeechData, load_params
from sonfolio.io import file_sha256, staged_dir, write_json, write_jsonl
from sonfolio.logs import setup_logging
from sonfolio.speech import hub, synthetic
from sonfolio.speech.dataset import check_skips, summarize

log = logging.getLogger(__name__)


def run(cfg: SpeechData, out: Path, metrics: Path) -> dict[str, Any]:
    """Build the dataset into `out` (replaced only on success) and write stats to `metrics`.

    Raises:
        TooManySkipped: more clips than speech_data.max_skip_fraction could not be used.
        DatasetUnavailable: source: hub and the corpus cannot be opened.
        ValueError: an unknown espeak-ng voice variant, or no train clip at all.
    """
    start = time.perf_counter()
    build = synthetic.build if cfg.source == "synthetic" else hub.build
    with staged_dir(out) as tmp:
        rows, skips = build(cfg, tmp)
        skipped = check_skips(skips, len(rows) + len(skips), cfg.max_skip_fraction)
        if not any(r.split == "train" for r in rows):
            raise ValueError(f"speech_data ({cfg.source}) gave no train clip: check its settings")
        write_jsonl(
            tmp / "manifest.jsonl",
            [{**asdict(r), "sha256": file_sha256(tmp / r.audio)} for r in rows],
        )
    stats = summarize(rows, skipped, cfg.source)
    elapsed = time.perf_counter() - start
    stats.update(seconds=round(elapsed, 2), utterances_per_s=round(len(rows) / elapsed, 1))
    write_json(metrics, stats)
    log.info(
        "%d clips %s, %s h; skipped %s",
        len(rows),
        stats["utterances"],
        stats["hours"],
        stats["skipped"],
    )
    return stats


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(params.speech_data, paths.track("speech").data, paths.metrics / "speech_data.json")


if __name__ == "__main__":
    main()
