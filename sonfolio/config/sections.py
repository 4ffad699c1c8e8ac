"""The top level of params.yaml: its section names, and the base of a stage's view of them.

A stage reads only the sections it declares (`load_sections(EvalParams)`), so that only their
schemas are its dependencies: dvc.yaml lists what a stage imports, and an edit to one stage's
schema then reruns that stage and what follows it, not every stage. Every stage still
validates the whole file before it works (`sonfolio.config.params.Params`, the check
`sonfolio check-params` runs), so a bad value anywhere fails in the first stage that runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import model_validator

from sonfolio.config.base import Strict, parse, read_yaml
from sonfolio.config.paths import Paths

# Every section of params.yaml: the fields of sonfolio.config.params.Params, in its order
# (tests/test_config.py checks that they agree). Here so that a stage knows them without
# importing every schema.
SECTIONS = (
    "paths",
    "score_data",
    "score_tokenizer",
    "speech_data",
    "speech_tokenizer",
    "train_engine",
    "train_presets",
    "score_train",
    "speech_train",
    "score_qat",
    "speech_qat",
    "export",
    "score_export",
    "speech_export",
    "bench",
    "score_bench",
    "speech_bench",
    "score_eval",
    "speech_eval",
    "infer",
    "serve",
    "estimate",
    "report",
)

# The steps with a params section per track (`<track>_<step>`); data, tokenizer, train, qat,
# export, bench and eval run once per entry of paths.tracks.
TRACK_STEPS = ("data", "tokenizer", "train", "qat", "export", "bench", "eval")


class Sections(Strict):
    """Some sections of params.yaml: `paths`, and the ones a subclass declares as fields."""

    paths: Paths

    @model_validator(mode="after")
    def _tracks_have_sections(self) -> Sections:
        for track in self.paths.tracks:
            missing = [f"{track}_{s}" for s in TRACK_STEPS if f"{track}_{s}" not in SECTIONS]
            if missing:
                raise ValueError(
                    f"paths.tracks.{track} has no params sections {missing}: a track needs one "
                    "per step (docs/architecture.md, adding a track)"
                )
        return self

    def section(self, track: str, step: str) -> Any:
        """The params section of one step for one track: `<track>_<step>` (score_train)."""
        self.paths.track(track)  # an unknown track names the known ones
        return getattr(self, f"{track}_{step}")


S = TypeVar("S", bound=Sections)


def parse_sections(model: type[S], raw: object, origin: str = "params.yaml") -> S:
    """The sections `model` declares, validated, out of a loaded params mapping; every other
    known section is left out unread, and a key that is no section stays in to be refused.

    Raises:
        ParamsError: naming every bad key, its value and what is allowed.
    """
    if isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if k in model.model_fields or k not in SECTIONS}
    return parse(model, raw, origin)


def read_sections(model: type[S], path: Path | str = "params.yaml") -> S:
    """Read params.yaml and validate the sections `model` declares (`parse_sections`); the
    other sections are not looked at (sonfolio.config.stage.load_sections checks them too).

    Raises:
        ParamsError: the file is missing or not YAML, or names every bad key, its value and
            what is allowed.
    """
    path = Path(path)
    return parse_sections(model, read_yaml(path), str(path))
