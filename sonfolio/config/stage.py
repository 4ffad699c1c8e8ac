"""What a stage reads of params.yaml: its own sections (its view, sonfolio.config.<step>), after
which the whole file is validated too, so a bad value anywhere fails in the first stage a
`dvc repro` runs. The whole-file check imports every schema (sonfolio.config.params) inside
the one function the deps test skips: it can stop a stage, never change what it writes.
"""

from __future__ import annotations

from pathlib import Path

from sonfolio.config.base import read_yaml
from sonfolio.config.sections import S, read_sections


def load_sections(model: type[S], path: Path | str = "params.yaml") -> S:
    """Read params.yaml and validate the sections `model` declares (`parse_sections`).

    Raises:
        ParamsError: the file is missing or not YAML, or names every bad key, its value and
            what is allowed.
    """
    path = Path(path)
    view = read_sections(model, path)  # this stage's own sections' errors first
    _validate_every_section(read_yaml(path), str(path))
    return view


def check_file(path: Path | str = "params.yaml") -> None:
    """Validate the whole of params.yaml and read nothing from it: the check_params stage,
    which DVC runs before every other stage, so a bad value fails before DVC removes any
    stage's outputs.

    Raises:
        ParamsError: the file is missing, not YAML, has a key twice, or names every bad key.
    """
    path = Path(path)
    _validate_every_section(read_yaml(path), str(path))


def _validate_every_section(raw: object, origin: str) -> None:
    """Validate the whole of params.yaml, not only the sections this stage reads: a bad value
    anywhere fails in the first stage `dvc repro` runs, in seconds, not hours later in the
    stage that reads it.

    Its imports are in no stage's deps (tests/test_dvc_yaml.py skips this function): another
    section's schema can make a stage stop, never change what it writes, so an edit to it
    must not rerun the stage.

    Raises:
        ParamsError: naming every bad key in any section.
    """
    from sonfolio.config.params import parse_params

    parse_params(raw, origin)
