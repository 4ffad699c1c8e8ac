"""data@score: the score dataset, one image per staff system (sonfolio.faces.DataFace)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sonfolio.config.data import ScoreData
    from sonfolio.faces import BuiltData


class ScoreDataFace:
    name = "score"
    data_file = "image"  # the manifest column naming each row's file (the step hashes it)
    data_items = "systems"  # what a manifest row is, in the metrics' `systems_per_s`

    def build_data(self, cfg: ScoreData, download_cache: Path, out: Path) -> BuiltData:
        """The score dataset rendered into `out`: its manifest rows and its stats.

        Real and synthetic music, one image per staff system; rows (image, text, piece,
        collection, split) as sonfolio.score.data.dataset.build makes them. Archive sources
        are fetched into `download_cache`.
        """
        from sonfolio.score.data.dataset import build

        return build(cfg, download_cache, out)


FACE = ScoreDataFace()
