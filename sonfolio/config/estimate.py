"""The params section `estimate`, and what the estimate stage reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from sonfolio.config.base import Positive, Strict
from sonfolio.config.data import ScoreData
from sonfolio.config.train import EngineSections, ScoreTrain, SpeechTrain


class EstimateSteps(Strict):
    """Optimizer steps of a real-scale run per track, priced beside the stage's max_steps."""

    score: Positive
    speech: Positive


class Estimate(Strict):
    """`sonfolio estimate` (docs/cost.md): measured steps priced on cloud GPUs. Not a stage."""

    steps: Positive  # timed optimizer steps per track
    warmup_steps: Annotated[int, Field(ge=0)]  # untimed steps first (allocator, compile)
    full_run_steps: EstimateSteps  # a real-scale run, priced beside the stage's max_steps
    prices: Path | None  # a price table (YAML); null: sonfolio/gpu_prices.yaml


class EstimateParams(EngineSections):
    """What stage estimate reads: `estimate`, and what train reads (it times the steps train
    would run, on the model train builds)."""

    score_data: ScoreData
    score_train: ScoreTrain
    speech_train: SpeechTrain
    estimate: Estimate
