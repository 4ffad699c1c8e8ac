"""Stage estimate: time real training steps of one track on this machine and price a full run
on cloud GPUs (what `sonfolio estimate --track <track>` prints; docs/cost.md).

Run:    dvc repro estimate            (every track: estimate@score, estimate@speech)
        python -m tasks.estimate score
Reads:  params.yaml (estimate, <track>_train, train_engine, train_presets, paths; score also
        score_data.image_long_side), ${paths.tracks.<track>.data}/manifest.jsonl,
        ${paths.tracks.<track>.tokenizer}/ (the model and batches are built as the track's
        training stage builds them)
Writes: ${paths.metrics}/estimate_<track>.json (seconds per step measured here, FLOPs, MFU,
        and the price table's rows), read by the report

The first of the pipeline's steps written once for every track (dvc.yaml `foreach`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from sonfolio import tracks
from sonfolio.config.estimate import EstimateParams
from sonfolio.config.stage import load_sections
from sonfolio.estimate import estimate
from sonfolio.io import write_json
from sonfolio.logs import setup_logging

log = logging.getLogger(__name__)

STAGE = "estimate"


def run(params: EstimateParams, track: str, metrics_path: Path) -> dict[str, Any]:
    """Measure and price `track`; write the figures to `metrics_path` and return them.

    Raises:
        MissingInput: the track's data or tokenizer stage has not run.
        DeviceCannotDo, PriceTableError: as `sonfolio estimate`.
    """
    report = estimate(params, [track])
    write_json(metrics_path, report)
    t = report["tracks"][track]
    log.info("%s: %.3f s per step on %s", track, t["seconds_per_step"], report["device"])
    return report


def main() -> None:
    setup_logging()
    track = tracks.from_argv(sys.argv[1:], STAGE)
    params = load_sections(EstimateParams)
    run(params, track, params.paths.metrics / f"{STAGE}_{track}.json")


if __name__ == "__main__":
    main()
