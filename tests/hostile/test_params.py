"""Careless params.yaml: a true/false where a number belongs and a key written twice are
errors that name the key (and both lines), and a bad value set with `dvc exp run -S` fails in
the check_params stage, before DVC removes any other stage's outputs (real DVC, a throwaway
project)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from project_repo import dvc, git, ran

from sonfolio.cli import main as cli
from sonfolio.config.base import ParamsError
from sonfolio.config.params import load_params, parse_params

ROOT = Path(__file__).resolve().parents[2]
REAL = yaml.safe_load((ROOT / "params.yaml").read_text())


def with_value(section: str, key: str, value: object) -> dict:
    raw = json.loads(json.dumps(REAL))  # a deep copy
    raw[section][key] = value
    return raw


@pytest.mark.parametrize(
    ("section", "key", "value", "shown"),
    [
        ("score_train", "max_steps", True, "true"),  # an int
        ("score_train", "weight_decay", False, "false"),  # a float
        ("score_train", "effective_batch", True, "true"),
    ],
)
def test_a_bool_for_a_number_is_an_error_naming_the_key(section, key, value, shown):
    with pytest.raises(ParamsError) as err:
        parse_params(with_value(section, key, value))
    assert f"{section}.{key}: {shown} is a true/false value" in str(err.value)


def test_a_bool_inside_a_list_of_numbers_is_an_error():
    raw = json.loads(json.dumps(REAL))
    raw["score_train"]["model"]["patch"] = [32, True]
    with pytest.raises(ParamsError, match=r"score_train\.model\.patch: \[32, true\]"):
        parse_params(raw)


def test_an_int_for_a_float_and_a_bool_for_a_bool_still_pass():
    params = parse_params(with_value("score_train", "weight_decay", 0))
    assert params.score_train.weight_decay == 0.0
    flags = {k: v for k, v in REAL["train_engine"].items() if isinstance(v, bool)}
    assert flags, "the real params.yaml has true/false keys, and they load"
    assert all(
        getattr(load_params(ROOT / "params.yaml").train_engine, k) == v for k, v in flags.items()
    )


def test_yes_written_for_a_number_is_an_error(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    path = tmp_path / "params.yaml"
    path.write_text(text.replace("score_train:\n", "score_train:\n  max_steps: yes\n", 1), "utf-8")
    # `yes` is YAML 1.1's true; max_steps is now also written twice: the duplicate is found first
    with pytest.raises(ParamsError, match="max_steps"):
        load_params(path)


def duplicate(tmp_path: Path, section: str, key: str, value: str) -> tuple[Path, int, int]:
    """params.yaml with `key: value` added as the first key of `section`; the two lines."""
    lines = (ROOT / "params.yaml").read_text().splitlines(keepends=True)
    head = lines.index(f"{section}:\n")
    indent = "  "
    first = head + 2
    lines.insert(head + 1, f"{indent}{key}: {value}\n")
    second = next(
        i + 1
        for i, line in enumerate(lines)
        if i + 1 > first and line.startswith(f"{indent}{key}:")
    )
    path = tmp_path / "params.yaml"
    path.write_text("".join(lines), encoding="utf-8")
    return path, first, second


def test_a_key_written_twice_is_an_error_naming_both_lines(tmp_path):
    path, first, second = duplicate(tmp_path, "score_train", "max_steps", "7")
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert f"key 'max_steps' is written twice in one mapping, on lines {first} and {second}" in (
        str(err.value)
    )


def test_a_top_level_section_written_twice_is_an_error(tmp_path):
    path = tmp_path / "params.yaml"
    text = (ROOT / "params.yaml").read_text()
    path.write_text(text + "\nreport:\n  title: twice\n", encoding="utf-8")
    with pytest.raises(ParamsError, match="key 'report' is written twice"):
        load_params(path)


def test_check_params_says_what_is_wrong_without_a_traceback(tmp_path, capsys):
    path, first, second = duplicate(tmp_path, "score_train", "lr", "0.1")
    assert cli(["check-params", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"lines {first} and {second}" in err and "Traceback" not in err


# --- the check_params stage with real DVC -------------------------------------------------

CONSUMER = (
    "python -c \"import yaml, pathlib; p = yaml.safe_load(open('params.yaml'));"
    " pathlib.Path('out').mkdir(exist_ok=True);"
    " pathlib.Path('out/result.txt').write_text(str(p['score_train']['max_steps']))\""
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git + DVC project: the real check_params stage, the real params.yaml and schemas, and
    one stage after it that reads score_train.max_steps and writes out/result.txt; run once
    and committed."""
    repo = tmp_path / "proj"
    shutil.copytree(ROOT / "sonfolio" / "config", repo / "sonfolio" / "config")
    shutil.copy(ROOT / "sonfolio" / "__init__.py", repo / "sonfolio" / "__init__.py")
    (repo / "tasks").mkdir()
    for name in ("__init__.py", "check_params.py"):
        shutil.copy(ROOT / "tasks" / name, repo / "tasks" / name)
    shutil.copy(ROOT / "params.yaml", repo / "params.yaml")
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    check = stages["check_params"]
    consumer = {
        "cmd": CONSUMER,
        "deps": [d for d in stages["report"]["deps"] if "check_params" in d],
        "params": ["score_train.max_steps"],
        "outs": ["out/result.txt"],
    }
    dvc_yaml = {"stages": {"check_params": check, "consumer": consumer}}
    (repo / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml, sort_keys=False))
    git(repo, "init", "-q", "-b", "main")
    dvc(repo, "init", "-q")
    assert set(ran(dvc(repo, "repro"))) == {"check_params", "consumer"}
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "run")
    return repo


@pytest.mark.slow
def test_a_bad_value_set_with_exp_run_fails_before_any_output_is_removed(project):
    before = (project / "out" / "result.txt").read_text()
    res = dvc(project, "exp", "run", "-S", "score_train.max_steps=true", ok=False)
    assert res.returncode != 0
    assert "score_train.max_steps: true is a true/false value" in res.stdout + res.stderr
    assert ran(res) == ["check_params"]
    assert (project / "out" / "result.txt").read_text() == before  # still there, untouched


@pytest.mark.slow
def test_a_good_change_reruns_only_the_stages_that_read_it(project):
    res = dvc(project, "exp", "run", "-S", "score_train.lr=0.0002")
    assert ran(res) == ["check_params"]  # the check's output is the same: consumer is skipped
    res = dvc(project, "exp", "run", "-S", "score_train.max_steps=5")
    assert ran(res) == ["check_params", "consumer"]
    assert (project / "out" / "result.txt").read_text() == "5"
