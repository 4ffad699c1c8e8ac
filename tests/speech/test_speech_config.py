"""The speech sections of params.yaml: errors name the key, the bad value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sonfolio.config.base import ParamsError
from sonfolio.config.params import parse_params

ROOT = Path(__file__).resolve().parents[2]


def raw() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_shipped_speech_defaults_fine_tune_whisper_base_on_clips_that_fit_the_window() -> None:
    params = parse_params(raw())
    data, tok = params.speech_data, params.speech_tokenizer
    assert data.source == "synthetic" and tok.base_model == "package:whisper-base"
    assert params.speech_train.model.base_model == tok.base_model  # one tokenizer, one model
    assert data.synthetic.utterances <= 5000  # builds in under a minute on 2 cores
    assert data.max_duration_s <= tok.chunk_length_s


def test_a_voice_in_train_and_test_is_rejected() -> None:
    params = raw()
    params["speech_data"]["synthetic"]["test_voices"] = ["m1", "m7"]
    with pytest.raises(ParamsError, match=r"test_voices shares \['m1'\] with train_voices"):
        parse_params(params)


def test_a_reversed_range_names_the_key_and_the_fix() -> None:
    params = raw()
    params["speech_data"]["synthetic"]["rate_wpm"] = [210, 150]
    with pytest.raises(ParamsError, match=r"speech_data\.synthetic\.rate_wpm = \[210, 150\]"):
        parse_params(params)


def test_an_unknown_source_lists_the_allowed_ones() -> None:
    params = raw()
    params["speech_data"]["source"] = "youtube"
    with pytest.raises(ParamsError) as err:
        parse_params(params)
    assert "speech_data.source = 'youtube'" in str(err.value)
    assert "'synthetic' or 'hub'" in str(err.value)


def test_too_few_utterances_for_a_split_is_rejected() -> None:
    params = raw()
    params["speech_data"]["synthetic"].update(utterances=20, val_fraction=0.01)
    with pytest.raises(ParamsError, match=r"val_fraction = 0\.01 of 20 utterances"):
        parse_params(params)


def test_unknown_speech_key_is_rejected() -> None:
    params = raw()
    params["speech_tokenizer"]["chunk_lenght_s"] = 8
    with pytest.raises(ParamsError, match=r"speech_tokenizer\.chunk_lenght_s: unknown key"):
        parse_params(params)
