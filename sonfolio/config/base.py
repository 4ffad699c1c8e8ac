"""The shared parts of the params schemas: the strict base model, field types, ParamsError.

A bad value in params.yaml (or one set with `dvc exp run -S key=value`, which edits
params.yaml) fails before any work with the key, the value and what is allowed. Unknown keys
are rejected (`extra="forbid"`): a typo is an error, not a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

Fraction01 = Annotated[float, Field(ge=0.0, le=1.0)]
Positive = Annotated[int, Field(gt=0)]


class Strict(BaseModel):
    """A params model: unknown keys are errors, and a validated value is frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ParamsError(ValueError):
    """params.yaml is missing, unreadable or invalid; the message lists every problem."""


def describe(err: ValidationError, origin: str) -> str:
    """Every problem of `err` on a line of its own: the key, the value and what is allowed."""
    lines = [f"{origin} is invalid ({err.error_count()} problem(s)):"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"  - {key}: unknown key (remove it, or check its spelling)")
        elif e["type"] == "missing":
            lines.append(f"  - {key}: missing (add it to {origin})")
        elif e["type"] == "value_error":  # our own validators: the message names the values
            lines.append(f"  - {key}: {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"  - {key} = {e.get('input')!r}: {e['msg']}")
    return "\n".join(lines)


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], raw: object, origin: str) -> M:
    """`raw` (a loaded params mapping) validated as `model`.

    Raises:
        ParamsError: naming every bad key, its value and what is allowed.
    """
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(describe(err, origin)) from None


def read_yaml(path: Path) -> Any:
    """params.yaml as loaded by YAML, not yet validated.

    Raises:
        ParamsError: the file is missing or is not YAML.
    """
    if not path.is_file():
        raise ParamsError(f"{path} not found: run from the project root, or pass its path")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ParamsError(f"{path} is not valid YAML: {err}") from None
