"""Stage data: one track's dataset, its files (images, clips) and their manifest.

Run:    dvc repro data            (every track: data@score, data@speech)
        python -m tasks.data score
Reads:  params.yaml (<track>_data, paths); what the track builds from (score: music21's corpus
        or the configured folders/archives, cached in paths.download_cache; speech: espeak-ng,
        or the corpus speech_data.hub.name)
Writes: ${paths.tracks.<track>.data}/ (the files, manifest.jsonl: a row per file, with its
        sha256), ${paths.metrics}/<track>_data.json (counts per split, skipped inputs by
        reason: the same for the same data, so eval@<track>, which reads it, is not rerun by
        a data rerun that changed nothing), ${paths.metrics}/<track>_data_time.json (seconds,
        <items>_per_s: this run's)

What a track builds and the rows it writes are its data face's (`build_data`); skipped inputs
are counted and capped there. Nothing is left in place of the output on failure.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio import tracks
from sonfolio.config.data import DataParams
from sonfolio.config.stage import load_sections
from sonfolio.io import file_sha256, staged_dir, write_json, write_jsonl
from sonfolio.logs import setup_logging
from sonfolio.parallel import sigterm_raises

if TYPE_CHECKING:
    from sonfolio.faces import DataFace  # annotations only: no stage dep

log = logging.getLogger(__name__)


def run(
    cfg: Any, track: DataFace, download_cache: Path, out: Path, metrics: Path
) -> dict[str, Any]:
    """Build `track`'s dataset from `cfg` (its <track>_data section) into `out`, replaced only
    on success, and write its stats to `metrics`.

    Raises:
        What the track's build raises: too many skipped inputs (TooManySkipped, naming the key
        to raise), a missing tool or source, a setting that gives no train row.
    """
    start = time.perf_counter()
    with staged_dir(out) as tmp:
        rows, stats = track.build_data(cfg, download_cache, tmp)
        # Downstream stages depend on the manifest alone: the hash makes it change whenever
        # a file does.
        manifest = [{**r, "sha256": file_sha256(tmp / r[track.data_file])} for r in rows]
        write_jsonl(tmp / "manifest.jsonl", manifest)
    elapsed = time.perf_counter() - start
    write_json(metrics, stats)
    timing = {
        "seconds": round(elapsed, 2),
        f"{track.data_items}_per_s": round(len(rows) / elapsed, 2),
    }
    write_json(timing_path(metrics), timing)
    log.info(
        "%s data: %d %s in %.1f s, in %s", track.name, len(rows), track.data_items, elapsed, out
    )
    return stats | timing


def timing_path(metrics: Path) -> Path:
    """Where a data stage whose stats go to `metrics` writes its run's time."""
    return metrics.with_name(f"{metrics.stem}_time.json")


def main() -> None:
    setup_logging()
    track = tracks.from_argv(sys.argv[1:], "data")
    params = load_sections(DataParams)
    # A stopped stage (SIGTERM from DVC, Prefect or `kill`) unwinds like Ctrl-C: its workers
    # are stopped and its staged folder removed, instead of both being left behind.
    with sigterm_raises():
        run(
            params.section(track, "data"),
            tracks.face(track, "data"),
            params.paths.download_cache,
            params.paths.track(track).data,
            params.paths.metrics / f"{track}_data.json",
        )


if __name__ == "__main__":
    main()
