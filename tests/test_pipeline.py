"""The pipeline as users drive it: `dvc repro`, `dvc exp run -S`, a DVC remote, Prefect.

Runs the real score stages (shrunk params) in a throwaway git repo holding this project.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from project_repo import TARGET, dvc, git, ran

pytestmark = pytest.mark.slow


def set_param(repo: Path, section: str, key: str, value: object) -> None:
    path = repo / "params.yaml"
    raw = yaml.safe_load(path.read_text())
    raw[section][key] = value
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def test_second_repro_runs_nothing(project):
    assert ran(dvc(project, "repro", TARGET)) == []
    status = dvc(project, "status", "--with-deps", TARGET).stdout
    assert "Data and pipelines are up to date" in status


def test_tokenizer_param_reruns_only_the_tokenizer(project):
    set_param(project, "score_tokenizer", "vocab_size", 300)
    assert ran(dvc(project, "repro", TARGET)) == ["check_params", "tokenizer@score"]
    git(project, "checkout", "params.yaml", "dvc.lock")
    dvc(project, "checkout", "--with-deps", TARGET)


def test_data_param_reruns_both(project):
    set_param(project, "score_data", "bars_per_system", 3)
    assert ran(dvc(project, "repro", TARGET)) == ["check_params", "data@score", "tokenizer@score"]
    git(project, "checkout", "params.yaml", "dvc.lock")
    dvc(project, "checkout", "--with-deps", TARGET)


def test_exp_run_override_goes_through_validation(project):
    res = dvc(project, "exp", "run", "-S", "score_data.bars_per_system=99", TARGET, ok=False)
    assert res.returncode != 0
    assert "score_data.bars_per_system = 99" in res.stdout + res.stderr
    git(project, "checkout", "params.yaml")


def test_a_second_machine_pulls_what_the_first_computed(project, tmp_path):
    remote = tmp_path / "remote"
    dvc(project, "remote", "add", "-f", "-d", "shared", str(remote))
    dvc(project, "push", "--run-cache", "--with-deps", TARGET)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    dvc(clone, "remote", "add", "-f", "-d", "shared", str(remote))
    dvc(clone, "pull", "--run-cache", "--with-deps", TARGET)
    assert (clone / "data/score/manifest.jsonl").is_file()
    assert ran(dvc(clone, "repro", TARGET)) == []
    # With the outputs gone, the run cache restores them instead of rerunning the stages.
    (clone / "dvc.lock").unlink()
    res = dvc(clone, "repro", TARGET)
    assert ran(res) == []
    assert "is cached - skipping run" in res.stdout
