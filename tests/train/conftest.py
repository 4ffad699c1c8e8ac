"""Training fixtures: a tiny score dataset (PIL-drawn systems, a BPE trained here) and a tiny
speech dataset (the real data and tokenizer stages of the speech track on a few espeak-ng
clips)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import make_score_data

from sonfolio.config.params import Params


@pytest.fixture(autouse=True)
def _quiet_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def score_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("score_tiny")
    return make_score_data(folder, {"train": 48, "val": 8, "test": 4, "heldout": 4})


@pytest.fixture(scope="session")
def speech_data(params: Params, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """data/ (manifest + wavs) from the real stage, 40 clips; processor/ from the tokenizer
    stage under the from-scratch preset (a BPE), processor_base/ under the default (the
    installed whisper-base's own tokenizer and feature extractor)."""
    from sonfolio import tracks
    from tasks.data import run as data_run
    from tasks.tokenizer import run as tokenizer_run

    root = tmp_path_factory.mktemp("speech_tiny")
    cfg = params.speech_data
    syn = cfg.synthetic.model_copy(
        update={"utterances": 40, "val_fraction": 0.1, "test_fraction": 0.1}
    )
    data_run(
        # the real voice is an eval set only: training tests do without it
        cfg.model_copy(
            update={
                "synthetic": syn,
                "workers": 1,
                "real": cfg.real.model_copy(update={"enabled": False}),
            }
        ),
        tracks.face("speech", "data"),
        root / "downloads",
        root / "data",
        root / "speech_data.json",
    )
    manifest = root / "data" / "manifest.jsonl"
    tok_cfg = params.speech_tokenizer.model_copy(update={"vocab_size": 300, "base_model": None})
    speech = tracks.face("speech", "tokenizer")
    tokenizer_run(tok_cfg, speech, manifest, root / "processor", root / "speech_tokenizer.json")
    base = params.speech_tokenizer
    tokenizer_run(base, speech, manifest, root / "processor_base", root / "base_tokenizer.json")
    return root
