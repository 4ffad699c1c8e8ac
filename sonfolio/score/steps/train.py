"""train@score (and qat@score, estimate@score): how the score model trains
(sonfolio.faces.TrainFace)."""

from __future__ import annotations

from typing import Any


class ScoreTrainFace:
    name = "score"

    def training(self, params: Any) -> Any:
        """How this track trains (a sonfolio.train.setup.Training): score_train, with the
        width the data step renders every system at (score_data.image_long_side), which is
        the model's input width."""
        from sonfolio.score.model.training import ScoreTraining

        return ScoreTraining(params.score_train, params.score_data.image_long_side)


FACE = ScoreTrainFace()
