"""qat@score: the trained score model reloaded to train further (sonfolio.faces.QatFace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ScoreQatFace:
    name = "score"

    def load_trained(self, folder: Path) -> Any:
        """The model train@score saved in `folder`, ready to train further (its CTC head
        attached where it reads with one)."""
        from sonfolio.score.model.model import load_trained

        return load_trained(folder)


FACE = ScoreQatFace()
