"""The params sections `<track>_qat`, and what the qat stage reads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from sonfolio.config.data import ScoreData
from sonfolio.config.export import Export
from sonfolio.config.train import EngineSections, ScoreTrain, SpeechTrain, TrainLoop


class QatTrain(TrainLoop):
    """A QAT fine-tune of the trained FP32 model (sonfolio/qat.py), once per scheme."""

    schemes: Annotated[list[Literal["int8", "int4"]], Field(min_length=1)]
    int4_group_size: Literal[16, 32, 64, 128]  # input columns sharing one int4 scale

    @model_validator(mode="after")
    def _unique(self) -> QatTrain:
        if len(set(self.schemes)) != len(self.schemes):
            raise ValueError(f"schemes {self.schemes} lists a scheme twice")
        return self


class QatParams(EngineSections):
    """What stage qat reads: `<track>_qat`, and what train reads (the model it fine-tunes is
    built as train builds it), and export.int8_weight_bits (the int8 range it trains for)."""

    score_data: ScoreData
    score_train: ScoreTrain
    speech_train: SpeechTrain
    score_qat: QatTrain
    speech_qat: QatTrain
    export: Export
