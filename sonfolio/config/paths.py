"""The params section `paths`: where each stage writes, a folder set per track."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import model_validator

from sonfolio.config.base import Strict


class TrackPaths(Strict):
    """Where one track's steps write: paths.tracks.<track>. dvc.yaml runs every step once per
    entry (foreach: ${paths.tracks}), so a new track's paths are one entry here."""

    data: Path  # data: images or audio, manifest.jsonl
    tokenizer: Path  # tokenizer (and image processor / feature extractor)
    model: Path  # train: the FP32 save_pretrained folder
    qat: Path  # qat: one QAT-trained HF model folder per scheme (int8/, int4/)
    export: Path  # export: ONNX variant folders (fp32/, int8_ptq/, int4_ptq/, ...)
    eval: Path  # eval: samples/ (side-by-side examples, predictions), quality.csv


# Keys of the flat layout before paths.tracks (changelog: docs/architecture.md), named in the
# error so that an old params.yaml says where its key went.
_MOVED_PATHS = {
    f"{track}_{kind}": f"paths.tracks.{track}.{kind}"
    for track in ("score", "speech")
    for kind in ("data", "tokenizer", "model", "qat", "export", "eval")
}


class Paths(Strict):
    """Where each stage writes; dvc.yaml reads the same keys as ${paths.*}."""

    tracks: dict[str, TrackPaths]
    checkpoints: Path
    live: Path
    metrics: Path
    download_cache: Path
    report: Path  # report: index.html, assets/, <track>_latency.csv (docs/report.md)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            moved = [f"paths.{k} is now {_MOVED_PATHS[k]}" for k in raw if k in _MOVED_PATHS]
            if moved:
                raise ValueError("; ".join(moved) + " (params.yaml: one entry per track)")
        return raw

    def track(self, name: str) -> TrackPaths:
        """paths.tracks.<name>; a ValueError names the known tracks."""
        if name not in self.tracks:
            raise ValueError(f"no track {name!r} in paths.tracks; known: {sorted(self.tracks)}")
        return self.tracks[name]

    def with_track(self, name: str, **updates: Path) -> Paths:
        """A copy with some of one track's paths replaced (a test's or a command's own)."""
        tracks = {**self.tracks, name: self.track(name).model_copy(update=updates)}
        return self.model_copy(update={"tracks": tracks})
