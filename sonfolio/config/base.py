"""The shared parts of the params schemas: the strict base model, field types, ParamsError.

A bad value in params.yaml (or one set with `dvc exp run -S key=value`, which edits
params.yaml) fails before any work with the key, the value and what is allowed. Unknown keys
are rejected (`extra="forbid"`): a typo is an error, not a silently ignored setting. A
true/false where a number belongs is an error (pydantic alone reads `max_steps: true` as 1),
a key written twice in one mapping is an error with both lines (YAML alone keeps the last), and
a YAML alias (`*name`) is an error with its line: params.yaml has no use for one, and aliases
of aliases grow a 1 KB file into gigabytes (8 levels kept `check-params` busy past 400 s).
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

Fraction01 = Annotated[float, Field(ge=0.0, le=1.0)]
Positive = Annotated[int, Field(gt=0)]


def _accepts_bool(annotation: Any) -> bool:
    """Whether a field's type takes a bool anywhere (bool, `bool | None`, Literal[True], Any)."""
    if annotation is bool or annotation is Any:
        return True
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(a, bool) for a in typing.get_args(annotation))
    return any(_accepts_bool(a) for a in typing.get_args(annotation))


def _holds_bool(value: Any) -> bool:
    """A bool, or a list/tuple holding one. Mappings are left to their own model's check."""
    if isinstance(value, bool):
        return True
    return isinstance(value, list | tuple) and any(_holds_bool(v) for v in value)


class Strict(BaseModel):
    """A params model: unknown keys are errors, a bool is no number, a validated value is
    frozen.

    Why not pydantic's `strict=True`: it also refuses what params.yaml rightly gives, a string
    for a Path, a list for a tuple, `1e-3` (a string to PyYAML) for a float. Only the bool is
    refused here, in every field whose type takes no bool.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _holds_bool(value) and not _accepts_bool(field.annotation):
            shown = json.dumps(value, default=str)  # as YAML wrote it: true, not True
            raise ValueError(
                f"{shown} is a true/false value (YAML reads yes/no/on/off so too), and this "
                "key takes none: write the number or text it needs"
            )
        return value


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
        ParamsError: the file is missing, is not YAML, names a key twice or holds an alias.
    """
    if not path.is_file():
        raise ParamsError(f"{path} not found: run from the project root, or pass its path")
    return load_yaml(path.read_text(encoding="utf-8"), str(path))


def load_yaml(text: str, origin: str) -> Any:
    """`text` (params.yaml's, read from `origin`) loaded by YAML, not yet validated.

    Raises:
        ParamsError: not YAML, a key written twice, or an alias; naming `origin` and the line.
    """
    try:
        # both loaders are SafeLoaders: no Python objects built from tags. libyaml's, where
        # PyYAML has it and the text holds no alias: ~10x faster on params.yaml (the start-up
        # of every command and stage); an alias is refused by ParamsLoader, with its line
        if _FAST is not None and not _has_alias(text):
            return yaml.load(text, Loader=_FAST)  # noqa: S506
        return yaml.load(text, Loader=ParamsLoader)  # noqa: S506
    except (DuplicateKeyError, AliasError) as err:
        raise ParamsError(f"{origin}: {err}") from None
    except yaml.YAMLError as err:
        raise ParamsError(f"{origin} is not valid YAML: {err}") from None


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping of params.yaml names one key twice."""


class AliasError(yaml.composer.ComposerError):
    """params.yaml holds a YAML alias (`*name`, `<<: *name` too)."""


class UniqueKeys:
    """A YAML constructor whose mappings refuse a key written twice (ParamsLoader)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[attr-defined]
            line = key_node.start_mark.line + 1
            if not isinstance(key, typing.Hashable):
                break  # SafeLoader's own construct_mapping refuses it, with its line
            if key in seen:
                raise DuplicateKeyError(
                    f"key {key!r} is written twice in one mapping, on lines {seen[key]} and "
                    f"{line}: YAML would keep only the last; delete one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class ParamsLoader(UniqueKeys, yaml.SafeLoader):
    """PyYAML's SafeLoader, less two things params.yaml never needs:

    - a key written twice in one mapping is an error naming both lines: PyYAML keeps the last
      silently, so an edit to the first copy would do nothing. (PyYAML has no option for this;
      ruamel.yaml has, but the project reads YAML with PyYAML.)
    - an alias is an error naming its line, refused as it is read, before it is expanded: a
      list of nine aliases of a list of nine aliases, eight levels deep, is 9**8 = 43 million
      values to validate from half a KB of text (issue 35: past 400 s; seven levels printed a
      72 MB error). An anchor (`&name`) alone repeats nothing and is let be.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            mark = event.start_mark
            raise AliasError(
                f"line {mark.line + 1}, column {mark.column + 1}: *{event.anchor} is a YAML "
                "alias, and params.yaml takes none: write the value out in full where it is "
                "used (aliases of aliases expand a small file into gigabytes)"
            )
        return super().compose_node(parent, index)


# ParamsLoader's checks on libyaml's parser (PyYAML built without it: None); its aliases are
# found first by `_has_alias`, as libyaml composes them where compose_node cannot see
_FAST = (
    type("FastParamsLoader", (UniqueKeys, yaml.CSafeLoader), {}) if yaml.__with_libyaml__ else None
)


def _has_alias(text: str) -> bool:
    """Whether the YAML text holds an alias (libyaml's event scan: no node is built)."""
    return any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=yaml.CSafeLoader))
