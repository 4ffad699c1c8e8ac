"""A params.yaml that costs more to read than it is worth (issue 35): YAML aliases, which
expand a 1 KB file into gigabytes, are refused as the file is read, naming the file and the
line, wherever params are read; and a bad value `dvc exp run -S` left in params.yaml comes
with what to do about it (real DVC, a throwaway project)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from project_repo import dvc, git, ran
from test_params import project  # noqa: F401 - the throwaway DVC project, a fixture

from sonfolio.config.base import ParamsError, read_yaml
from sonfolio.config.data import DataParams
from sonfolio.config.params import load_params
from sonfolio.config.stage import check_file, load_sections

ROOT = Path(__file__).resolve().parents[2]
REAL = (ROOT / "params.yaml").read_text(encoding="utf-8")


def alias_bomb(levels: int) -> str:
    """A top-level key of anchors whose last list holds 9**levels strings once its aliases
    expand."""
    lines = ["anchors:", "  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 9)}]" for k in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


HELDOUT = "heldout_collections: [irish]"


def bombed(tmp_path: Path, levels: int) -> tuple[Path, int]:
    """The real params.yaml with an alias bomb as a list it validates (the held-out
    collections), and the line of the bomb's first alias."""
    assert REAL.count(HELDOUT) == 1
    path = tmp_path / "params.yaml"
    text = alias_bomb(levels) + REAL.replace(HELDOUT, f"heldout_collections: *l{levels}")
    path.write_text(text, encoding="utf-8")
    return path, 3  # anchors:, l0 (the anchor), l1 (the first alias)


def test_an_alias_is_refused_naming_the_file_and_the_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("a: &base\n  x: 1\nb: *base\n")
    with pytest.raises(ParamsError) as err:
        read_yaml(path)
    assert str(err.value).startswith(f"{path}: line 3, column 4: *base is a YAML alias")
    assert "write the value out in full" in str(err.value)
    path.write_text("a: &base {x: 1}\nb:\n  <<: *base\n  y: 2\n")  # a merge key is an alias too
    with pytest.raises(ParamsError, match=r"line 3, column 7: \*base is a YAML alias"):
        read_yaml(path)
    path.write_text("a: &base {x: 1}\nb: {x: 1}\n")  # an anchor alone repeats nothing
    assert read_yaml(path) == {"a": {"x": 1}, "b": {"x": 1}}


def test_every_reader_of_params_refuses_an_alias_before_expanding_it(tmp_path):
    """check-params, the check_params stage and each stage's own sections read through the
    same loader; three levels (729 values) would otherwise be read and validated."""
    path, line = bombed(tmp_path, 3)
    for read in (load_params, check_file, lambda p: load_sections(DataParams, p)):
        with pytest.raises(ParamsError, match=rf"{path}: line {line}, column 12: \*l0 is a YAML"):
            read(path)


@pytest.mark.parametrize(
    "command",
    [["sonfolio.cli", "check-params"], ["tasks.check_params"]],
    ids=["sonfolio check-params", "stage check_params"],
)
def test_an_alias_bomb_is_refused_at_once_by_the_command_and_the_stage(tmp_path, command):
    """Eight levels (43 million values from 0.5 KB) kept check-params busy past 400 s (and
    seven printed a 72 MB error); the limit here is loose for a busy machine: refused, it takes
    what a valid file takes."""
    path, line = bombed(tmp_path, 8)
    start = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", *command, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    took = time.monotonic() - start
    assert res.returncode == 1
    assert f"{path}: line {line}, column 12: *l0 is a YAML alias" in res.stderr
    assert len(res.stderr) < 2000 and "Traceback" not in res.stderr
    assert took < 60, f"{took:.0f} s"
    assert not (tmp_path / "metrics").exists()


# --- `dvc exp run -S key=bad` and the params.yaml it leaves -----------------------------


@pytest.mark.slow
def test_exp_run_says_the_bad_value_stays_in_params_yaml_and_how_to_put_it_back(project):  # noqa: F811
    committed = (project / "params.yaml").read_text()
    head = git(project, "rev-parse", "HEAD").strip()
    res = dvc(project, "exp", "run", "-S", "score_train.lr=fast", ok=False)
    said = res.stdout + res.stderr
    assert res.returncode != 0 and ran(res) == ["check_params"]
    assert "lr: fast" in (project / "params.yaml").read_text()  # DVC wrote it, and left it
    assert "wrote its -S values into params.yaml before this check and leaves them there" in said
    assert f'score_train.lr: 0.003 in {head[:7]}, now "fast"' in said
    assert "`git checkout HEAD -- params.yaml`" in said
    git(project, "checkout", "HEAD", "--", "params.yaml")  # as it says
    assert (project / "params.yaml").read_text() == committed


@pytest.mark.slow
def test_exp_run_temp_says_the_workspace_params_yaml_is_untouched(project):  # noqa: F811
    committed = (project / "params.yaml").read_text()
    res = dvc(project, "exp", "run", "--temp", "-S", "score_train.lr=fast", ok=False)
    assert res.returncode != 0
    assert "set this in its own copy of the project: your params.yaml is unchanged" in (
        res.stdout + res.stderr
    )
    assert (project / "params.yaml").read_text() == committed


def test_outside_exp_run_the_error_says_nothing_of_it(tmp_path, capsys, monkeypatch):
    from tasks.check_params import main

    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    path, _ = bombed(tmp_path, 1)
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert "YAML alias" in err and "dvc exp run" not in err


def test_libyamls_loader_reads_params_yaml_as_the_checked_python_one_does():
    # params.yaml holds no alias: it is read by libyaml (~10x faster), with the same result
    import yaml

    from sonfolio.config.base import ParamsLoader, load_yaml

    assert load_yaml(REAL, "params.yaml") == yaml.load(REAL, Loader=ParamsLoader)  # noqa: S506
