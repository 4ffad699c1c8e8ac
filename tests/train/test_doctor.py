"""`sonfolio doctor`: the machine, a timed matmul, and the engine's choices for each track,
each with its reason; the same as a table or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from tiny import ROOT

from sonfolio.cli import main
from sonfolio.config.params import Params
from sonfolio.doctor import diagnose

CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's choices")


def with_tokenizers(params: Params, score_tok: Path, speech_tok: Path) -> Params:
    paths = params.paths.with_track("score", tokenizer=score_tok)
    paths = paths.with_track("speech", tokenizer=speech_tok)
    return params.model_copy(update={"paths": paths})


@CPU_ONLY
def test_doctor_on_cpu_says_fp32_with_its_reason_and_measures_a_matmul(
    params, scratch, score_data, tmp_path
):
    p = with_tokenizers(scratch, score_data / "tokenizer", tmp_path / "no_tokenizer")
    report = diagnose(p, ["score", "speech"], matmul_seconds=0.2)
    assert report["backend"] == "cpu"
    assert report["gpu"] is None and report["bf16_supported"] is False
    assert report["matmul_tflops"]["fp32"] > 0
    assert report["host"]["cpu_cores"] >= 1 and report["host"]["ram_gib"] > 0
    assert report["versions"]["torch"] == torch.__version__
    assert {"transformers", "accelerate", "onnxruntime"} <= set(report["versions"])
    score = report["tracks"]["score"]
    assert score["precision"]["value"] == "fp32"
    assert "CPU" in score["precision"]["reason"]
    assert "sdpa" in score["attention"]  # read off the configured model, built on `meta`
    assert score["parameters"] > 0
    assert score["micro_batch"].startswith(f"{params.score_train.effective_batch} x 1")
    assert score["compile"].startswith("off")
    # a track whose tokenizer stage has not run: doctor says which stage to run, not a crash
    assert "dvc repro tokenizer@speech" in report["tracks"]["speech"]["attention"]
    # a base model needs no tokenizer stage: doctor reads the base's own config
    p = with_tokenizers(params, score_data / "tokenizer", tmp_path / "no_tokenizer")
    speech = diagnose(p, ["speech"], matmul_seconds=0.05)["tracks"]["speech"]
    assert "package:whisper-base" in speech["attention"], speech


@CPU_ONLY
def test_doctor_reports_what_the_cpu_cannot_train(params, score_data, tmp_path):
    engine = params.train_engine.model_copy(update={"precision": "fp16"})
    model = params.score_train.model.model_copy(update={"size": "base"})
    p = with_tokenizers(params, score_data / "tokenizer", tmp_path / "none")
    p = p.model_copy(
        update={
            "train_engine": engine,
            "score_train": p.score_train.model_copy(update={"model": model}),
        }
    )
    report = diagnose(p, ["score"], 0.1)["tracks"]["score"]
    assert report["precision"]["value"] == "impossible"
    assert "precision: auto" in report["precision"]["reason"]  # the fix, as the stage says it
    assert report["model"].startswith("impossible here") and "size: tiny" in report["model"]


def test_doctor_json_parses(score_data, tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["paths"]["tracks"]["score"]["tokenizer"] = str(score_data / "tokenizer")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    assert (
        main(["doctor", "--json", "--track", "score", "--params", str(tmp_path / "params.yaml")])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert set(report["tracks"]) == {"score"}
    assert report["backend"] in ("cpu", "cuda", "rocm")
    assert all(v > 0 for v in report["matmul_tflops"].values())
    assert report["tracks"]["score"]["precision"]["reason"]


def test_doctor_table_names_every_choice(score_data, tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["paths"]["tracks"]["score"]["tokenizer"] = str(score_data / "tokenizer")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    assert main(["doctor", "--track", "score", "--params", str(tmp_path / "params.yaml")]) == 0
    out = capsys.readouterr().out
    for choice in ("precision", "attention", "compile", "micro_batch", "optimizer", "fp8"):
        assert choice in out
    assert "TFLOP/s" in out
