"""Every track implements every step's face (sonfolio.faces): each attribute and method its
Protocol declares, with the same parameters, so a step never meets a track that lacks what it
asks for."""

from __future__ import annotations

import inspect

import pytest
import yaml
from test_dvc_yaml import ROOT

from sonfolio import faces, tracks

TRACKS = tuple(yaml.safe_load((ROOT / "params.yaml").read_text())["paths"]["tracks"])
PROTOCOLS = {
    "data": faces.DataFace,
    "tokenizer": faces.TokenizerFace,
    "train": faces.TrainFace,
    "qat": faces.QatFace,
    "export": faces.ExportFace,
    "bench": faces.BenchFace,
    "eval": faces.EvalFace,
    "report": faces.ReportFace,
    "infer": faces.InferFace,
}


def members(protocol: type) -> tuple[set[str], dict[str, inspect.Signature]]:
    """A Protocol's attributes (annotated) and methods (with their signatures)."""
    attributes = set(protocol.__annotations__)
    methods = {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }
    return attributes, methods


def test_every_step_has_a_protocol():
    assert set(PROTOCOLS) == set(faces.STEPS)


@pytest.mark.parametrize("track", TRACKS)
@pytest.mark.parametrize("step", faces.STEPS)
def test_a_track_implements_each_steps_face(track, step):
    face = tracks.face(track, step)
    attributes, methods = members(PROTOCOLS[step])
    missing = sorted(a for a in attributes | set(methods) if not hasattr(face, a))
    assert missing == [], f"sonfolio/{track}/steps/{step}.py lacks {missing}"
    assert face.name == track
    for name, expected in methods.items():
        got = inspect.signature(getattr(face, name))
        want = [p for p in expected.parameters if p != "self"]
        assert list(got.parameters) == want, f"{track} {step}.{name}{got} vs {expected}"
