"""train@speech (and qat@speech, estimate@speech): how Whisper is fine-tuned
(sonfolio.faces.TrainFace)."""

from __future__ import annotations

from typing import Any


class SpeechTrainFace:
    name = "speech"

    def training(self, params: Any) -> Any:
        """How this track trains (a sonfolio.train.setup.Training): speech_train."""
        from sonfolio.speech.model.training import SpeechTraining

        return SpeechTraining(params.speech_train)


FACE = SpeechTrainFace()
