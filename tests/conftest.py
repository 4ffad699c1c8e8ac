"""Shared fixtures: the real params.yaml (tests shrink it, never replace it) and LilyPond."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from project_repo import TARGET, copy_project, dvc, git, ran

from sonfolio.config.base import read_yaml
from sonfolio.config.params import Params, load_params, parse_params
from sonfolio.config.presets import apply

ROOT = Path(__file__).resolve().parents[1]

# No telemetry, no hub: tests pass on a machine with no network. Set when conftest is imported,
# before huggingface_hub / datasets / transformers read them at their own import.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def params() -> Params:
    return load_params(ROOT / "params.yaml")


@pytest.fixture(scope="session")
def scratch() -> Params:
    """The real params.yaml with the speech-from-scratch preset laid over it (a tiny Whisper
    and a project BPE: sonfolio/config/presets.py), for tests of that path."""
    return parse_params(apply(read_yaml(ROOT / "params.yaml"), "speech-from-scratch"))


@pytest.fixture(scope="session")
def lilypond() -> Path:
    from sonfolio.score.common.lilypond import find_lilypond

    return find_lilypond()


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_project(tmp_path_factory.mktemp("project"))
    assert ran(dvc(repo, "repro", TARGET)) == ["check_params", "data@score", "tokenizer@score"]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first repro")
    return repo
