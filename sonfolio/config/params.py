"""Params: every section of params.yaml validated together, and `load_params()` to read it.

`sonfolio check-params`, the commands (read, transcribe, serve, doctor, estimate) and the
tests use it; a stage validates only the sections it reads (sonfolio.config.sections), so that
an edit to another stage's schema does not rerun it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import model_validator

from sonfolio.config.base import parse
from sonfolio.config.bench import Bench, ScoreBench, SpeechBench
from sonfolio.config.data import ScoreData, SpeechData, check_clips_fit
from sonfolio.config.estimate import Estimate
from sonfolio.config.eval import ScoreEval, SpeechEval
from sonfolio.config.export import Export, TrackExport
from sonfolio.config.infer import Infer
from sonfolio.config.qat import QatTrain
from sonfolio.config.report import Report
from sonfolio.config.sections import Sections, read_sections
from sonfolio.config.serve import Serve
from sonfolio.config.tokenizer import ScoreTokenizer, SpeechTokenizer
from sonfolio.config.train import (
    EngineOptions,
    ScoreTrain,
    SpeechTrain,
    check_presets,
    check_score_input,
    engine_options,
)


class Params(Sections):
    """All of params.yaml: `paths` and every other section, in the file's order."""

    score_data: ScoreData
    score_tokenizer: ScoreTokenizer
    speech_data: SpeechData
    speech_tokenizer: SpeechTokenizer
    train_engine: EngineOptions
    train_presets: dict[str, dict]
    score_train: ScoreTrain
    speech_train: SpeechTrain
    score_qat: QatTrain
    speech_qat: QatTrain
    export: Export
    score_export: TrackExport
    speech_export: TrackExport
    bench: Bench
    score_bench: ScoreBench
    speech_bench: SpeechBench
    score_eval: ScoreEval
    speech_eval: SpeechEval
    infer: Infer
    serve: Serve
    estimate: Estimate
    report: Report

    @model_validator(mode="after")
    def _presets_valid(self) -> Params:
        check_presets(self)
        return self

    @model_validator(mode="after")
    def _clips_fit_the_window(self) -> Params:
        check_clips_fit(self.speech_data, self.speech_tokenizer)
        return self

    @model_validator(mode="after")
    def _score_images_fit_the_model(self) -> Params:
        check_score_input(self.score_train.model, self.score_data.image_long_side)
        return self

    def engine_options(self, preset: str) -> EngineOptions:
        """train_engine with the preset's keys laid over it."""
        return engine_options(self.train_engine, self.train_presets, preset)


def parse_params(raw: object, origin: str = "params.yaml") -> Params:
    """Validate an already-loaded params mapping."""
    return parse(Params, raw, origin)


def load_params(path: Path | str = "params.yaml") -> Params:
    """Read and validate params.yaml.

    Raises:
        ParamsError: naming every bad key, its value and what is allowed.
    """
    return read_sections(Params, path)  # every section: the whole file
