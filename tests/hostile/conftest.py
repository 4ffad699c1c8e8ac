"""Shared fixtures of the service's hostile tests (test_service.py, test_service_clients.py):
the tiny untrained models of tests/infer_tiny.py, and the service on them with the short
deadlines of tests/hostile/service.py (SLOW)."""

from __future__ import annotations

import pytest
from hostile.service import serving  # tests/ is on sys.path
from infer_tiny import (
    SYSTEMS,
    TINY_INFER,
    merge,
    render_systems,
    score_model,
    speech_model,
    speech_wav,
)

from sonfolio.config.params import parse_params


@pytest.fixture(scope="module")
def models(tmp_path_factory, params):
    root = tmp_path_factory.mktemp("hostile_serve")
    raw = params.model_dump(mode="json")
    merge(raw["infer"], TINY_INFER)  # few tokens, audio cuts for the tiny model's 2 s window
    return {
        "infer": parse_params(raw).infer,
        "score": score_model(root / "score"),
        "speech": speech_model(root / "speech", params),
        "wav": speech_wav(root / "clip.wav", seconds=1.0).read_bytes(),
        "systems": render_systems(SYSTEMS),  # real engravings, one staff each
    }


@pytest.fixture(scope="module")
def server(params, models):
    with serving(params, models) as (client, port):
        yield client, port
