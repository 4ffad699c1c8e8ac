"""A throwaway git repo holding this project, and running DVC in it, for pipeline tests.

A plain module (not conftest.py): test files import these by name, and conftest modules of
several folders would shadow each other.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def tiny_params(raw: dict) -> dict:
    """Shrink the real params.yaml to a few pieces and clips (seconds, not minutes)."""
    raw["speech_data"]["synthetic"]["utterances"] = 80
    raw["speech_eval"]["real"]["max_samples"] = 4  # the real voice: a few clips per model
    for stage in ("score_train", "speech_train"):
        raw[stage].update(
            max_steps=2, effective_batch=8, eval_every=2, warmup_steps=0, decode_max_tokens=4
        )
    data = raw["score_data"]
    data["sources"] = [
        {"name": "folk", "music21": "essenFolksong", "max_pieces": 10},
        {"name": "bach", "music21": "bach", "max_pieces": 3},
        {"name": "irish", "music21": "oneills1850", "max_pieces": 3},
    ]
    data.update(image_long_side=320, systems_per_process=40, workers=2)
    data["split"].update(val=0.15, test=0.15)
    raw["score_tokenizer"]["vocab_size"] = 200
    return raw


PROJECT_SOURCES = {
    "sonfolio",
    "tasks",
    "flows",
    ".dvc",
    ".dvcignore",
    ".gitignore",
    "dvc.yaml",
    "params.yaml",
    "pyproject.toml",
}


def copy_project(dest: Path) -> Path:
    """A git repo holding this project's files (tracked or not, less ignored ones), committed."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        # The code and the pipeline definition only: nothing this checkout has computed.
        if rel.split("/")[0] not in PROJECT_SOURCES:
            continue
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    raw = tiny_params(yaml.safe_load((dest / "params.yaml").read_text()))
    (dest / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "project copy")
    return dest


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    res = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def tool_env() -> dict[str, str]:
    """The environment for subprocesses: this interpreter's bin first, so `python` and `dvc`
    in dvc.yaml commands are the ones the tests run with."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


TARGET = "tokenizer@score"  # the score track's end so far; `dvc repro` of it runs both stages


def dvc(repo: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [sys.executable, "-m", "dvc", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env=tool_env(),
    )
    if ok:
        assert res.returncode == 0, res.stdout + res.stderr
    return res


def ran(res: subprocess.CompletedProcess[str]) -> list[str]:
    """The stages a `dvc repro` really ran (not skipped, not restored from the run cache)."""
    return re.findall(r"Running stage '([\w@]+)'", res.stdout)  # data@score: foreach stages
