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

    python -m tasks.check_params        # or: dvc repro check_params

Reads: params.yaml. Writes: ${paths.metrics}/check_params.json (constant).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sonfolio.config.base import ParamsError, read_yaml
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
        return 1
    print(f"{path} is valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
