"""Stage check_params: validate the whole params.yaml before any other stage runs.

DVC removes a stage's outputs before it runs the stage's command, so a bad value (`dvc exp run
-S score_train.max_steps=true`) caught by the stage itself came after its outputs were gone.
This stage depends on the whole of params.yaml and every other stage depends on its output, so
DVC runs it first whenever params.yaml changes, and a bad value stops `dvc repro` here, with
every output in place. Its output is the same bytes whenever the file is valid: a changed
value reruns only the stages that read it, not everything downstream of this one.

It imports no torch (a second or less). The stage schemas are not in its deps, so that editing
one reruns only its own stage (tests/test_config_stages.py): a schema tightened so that the
current params.yaml fails is caught by the stage that reads it, after DVC removed its outputs.

`dvc exp run -S key=bad` writes the value into the workspace's params.yaml before any stage
runs (rewritten in DVC's own layout: lists as blocks, the comments on their items gone), and
leaves it there when a stage fails: DVC keeps no copy of the file as it was. So under `dvc exp
run` the error also lists what differs from the experiment's baseline commit and how to put
the file back; under `dvc exp run --temp` or `--queue` (a copy of the project in
.dvc/tmp/exps) it says that the workspace's file is untouched.

    python -m tasks.check_params        # or: dvc repro check_params

Reads: params.yaml (and, under `dvc exp run`, the baseline commit's). Writes:
${paths.metrics}/check_params.json (constant).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sonfolio.config.base import ParamsError, load_yaml, read_yaml
from sonfolio.config.stage import check_file

OUTPUT = "check_params.json"
# The output's whole content: constant, so that no downstream stage reruns for it.
VALID = {"params.yaml": "valid"}


def run(params: Path, out: Path) -> None:
    """Validate `params` (ParamsError if not); then write `out`, via a temporary file renamed
    into place, so a failed check leaves no output that looks like a pass."""
    check_file(params)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(VALID) + "\n")
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    path = Path((argv if argv is not None else sys.argv[1:] or ["params.yaml"])[0])
    try:
        check_file(path)  # first: it names what is wrong, paths.metrics missing included
        run(path, Path(read_yaml(path)["paths"]["metrics"]) / OUTPUT)
    except ParamsError as err:
        print(err, file=sys.stderr)
        if hint := exp_run_hint(path, os.environ):
            print(hint, file=sys.stderr)
        return 1
    print(f"{path} is valid")
    return 0


def exp_run_hint(path: Path, env: Mapping[str, str]) -> str | None:
    """What became of `path` when `dvc exp run` set the bad value (DVC_EXP_NAME, DVC_ROOT and
    DVC_EXP_BASELINE_REV are what DVC gives its stages), or None outside `dvc exp run`."""
    name, root = env.get("DVC_EXP_NAME"), env.get("DVC_ROOT")
    if not name or not root:
        return None
    root_dir = Path(root).resolve()
    if path.resolve().parent != root_dir:  # --temp, --queue: a copy in .dvc/tmp/exps
        return (
            f"`dvc exp run` (experiment {name}) set this in its own copy of the project: your "
            f"{path} is unchanged. Run it again with a valid value."
        )
    rev = env.get("DVC_EXP_BASELINE_REV", "HEAD")
    changes = _changed_keys(path, root_dir, rev)
    return "\n".join(
        [
            f"`dvc exp run` (experiment {name}) wrote its -S values into {path} before this "
            "check and leaves them there now that it failed (DVC keeps no copy of the file as "
            "it was, and rewrote it in its own layout: lists as blocks, the comments on their "
            "items gone).",
            *changes,
            f"Fix the value in {path}, or put the committed file back, comments included: "
            f"`git checkout HEAD -- {path}` (this also drops edits to it you had not "
            f"committed: `git diff {path}` shows them all). `dvc exp run --temp -S key=value` "
            "tries a value without writing it into your params.yaml.",
        ]
    )


_MISSING = object()


def _changed_keys(path: Path, root: Path, rev: str, shown: int = 10) -> list[str]:
    """`path`'s keys that differ from commit `rev`'s copy, a line each; none if either cannot
    be read (no git, not committed, not YAML)."""
    try:
        rel = path.resolve().relative_to(root).as_posix()
        old = subprocess.run(
            ["git", "show", f"{rev}:{rel}"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        before = _flat(load_yaml(old, f"{rev[:7]}:{rel}"))
        now = _flat(read_yaml(path))
    except (OSError, subprocess.SubprocessError, ParamsError, ValueError):
        return []
    keys = [k for k in {**before, **now} if before.get(k, _MISSING) != now.get(k, _MISSING)]
    lines = [
        f"  {k}: {_shown(before.get(k, _MISSING))} in {rev[:7]}, now {_shown(now.get(k, _MISSING))}"
        for k in keys[:shown]
    ]
    more = [f"  ... and {len(keys) - shown} more"] if len(keys) > shown else []
    return [f"{path} differs from the experiment's baseline ({rev[:7]}) in:", *lines, *more]


def _flat(raw: Any, prefix: str = "") -> dict[str, Any]:
    """A loaded params mapping as dotted keys (score_train.lr); lists are values."""
    if not isinstance(raw, dict):
        return {prefix: raw} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _shown(value: Any) -> str:
    return "(absent)" if value is _MISSING else json.dumps(value, default=str)


if __name__ == "__main__":
    sys.exit(main())
