"""The tracks by name: a step asks `get(name)` for what is specific to one track.

A track is data (docs/architecture.md). Its definition, `sonfolio/<track>/definition.py`,
holds one object, `TRACK`, whose methods say how the track's data is built, its tokenizer,
its model, its batches, its metrics and how its output is decoded and shown. The steps in
tasks/ and the shared library (engine, QAT, export, bench, evaluation, inference, report)
take a definition and never branch on a track's name. The tracks a pipeline runs are the
entries of params.yaml's `paths.tracks`; dvc.yaml runs every step once per entry.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class UnknownTrack(ValueError):
    """A track name with no definition; the message says where a definition goes."""


def get(name: str) -> Any:
    """The definition `TRACK` of sonfolio/<name>/definition.py.

    Raises:
        UnknownTrack: the name is not a track (the message names the file it needs).
    """
    if not _NAME.match(name):
        raise UnknownTrack(f"track {name!r}: a track's name is lowercase letters, digits and _")
    module_name = f"sonfolio.{name}.definition"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name not in (module_name, f"sonfolio.{name}"):
            raise  # the definition exists but something it imports does not
        raise UnknownTrack(
            f"unknown track {name!r}: no sonfolio/{name}/definition.py (docs/architecture.md, "
            "adding a track)"
        ) from None
    return module.TRACK


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
    get(argv[0])
    return argv[0]
