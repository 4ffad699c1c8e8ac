"""The tracks by name: a step asks `face(name, step)` for what is specific to one track.

A track is data (docs/architecture.md). It implements each step's face (sonfolio.faces) in
its own module, `sonfolio/<track>/steps/<step>.py`, as one object `FACE`: how the track's
data is built, its tokenizer, its training, export, bench, evaluation, report and reading.
The steps in tasks/ and the shared library take a face and never branch on a track's name.
A stage imports its own step's face only, so its code deps are that module's closure
(tests/test_dvc_yaml.py finds every `face(..., "<step>")` call and follows it). The tracks a
pipeline runs are the entries of params.yaml's `paths.tracks`; dvc.yaml runs every step once
per entry.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    from sonfolio import faces

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class UnknownTrack(ValueError):
    """A track or step with no face; the message names the module it needs."""


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise UnknownTrack(f"track {name!r}: a track's name is lowercase letters, digits and _")


@overload
def face(name: str, step: Literal["data"]) -> faces.DataFace: ...
@overload
def face(name: str, step: Literal["tokenizer"]) -> faces.TokenizerFace: ...
@overload
def face(name: str, step: Literal["train"]) -> faces.TrainFace: ...
@overload
def face(name: str, step: Literal["qat"]) -> faces.QatFace: ...
@overload
def face(name: str, step: Literal["export"]) -> faces.ExportFace: ...
@overload
def face(name: str, step: Literal["bench"]) -> faces.BenchFace: ...
@overload
def face(name: str, step: Literal["eval"]) -> faces.EvalFace: ...
@overload
def face(name: str, step: Literal["report"]) -> faces.ReportFace: ...
@overload
def face(name: str, step: Literal["infer"]) -> faces.InferFace: ...


def face(name: str, step: str) -> Any:
    """The face `FACE` of sonfolio/<name>/steps/<step>.py: what `step` asks track `name`.

    Call it with the step as a literal string: the deps test reads those calls to know which
    faces a stage loads.

    Raises:
        UnknownTrack: the name is not a track, or the track lacks that step's module (the
            message names the file it needs).
    """
    _check_name(name)
    module_name = f"sonfolio.{name}.steps.{step}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name not in (module_name, f"sonfolio.{name}", f"sonfolio.{name}.steps"):
            raise  # the face exists but something it imports does not
        raise UnknownTrack(
            f"unknown track {name!r} or step {step!r}: no sonfolio/{name}/steps/{step}.py "
            "(docs/architecture.md, adding a track)"
        ) from None
    return module.FACE


def from_argv(argv: list[str], step: str) -> str:
    """The track a step runs for: `python -m tasks.<step> <track>` (dvc.yaml passes it).

    Raises:
        UnknownTrack: no track, or more than one, on the command line.
    """
    if len(argv) != 1:
        raise UnknownTrack(
            f"usage: python -m tasks.{step} <track> (one of params.yaml's paths.tracks, "
            f"e.g. score); got {argv or 'nothing'}"
        )
    _check_name(argv[0])
    if importlib.util.find_spec(f"sonfolio.{argv[0]}") is None:
        raise UnknownTrack(
            f"unknown track {argv[0]!r}: no sonfolio/{argv[0]}/steps/ (docs/architecture.md, "
            "adding a track)"
        )
    return argv[0]
