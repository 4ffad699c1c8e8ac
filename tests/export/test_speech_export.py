"""Whisper export: the fixed time axis, the merged decoder, and the variants load with optimum."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from sonfolio.config.params import load_params
from sonfolio.export.layout import DECODER, validate_variant
from sonfolio.tracks import face
from tasks.export import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory) -> Path:
    """An untrained 2-layer Whisper on a 1 s window (50 encoder positions), saved as HF."""
    from export.hub_whisper import tiny_config  # tests/ is on sys.path
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    folder = tmp_path_factory.mktemp("whisper") / "model"
    config = tiny_config(vocab_size=96, decoder_layers=1, start=1, bos=1, eos=2, pad=0)
    torch.manual_seed(0)
    WhisperForConditionalGeneration(config).save_pretrained(str(folder))
    WhisperFeatureExtractor(feature_size=80, chunk_length=1).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def exported(tiny_whisper, tmp_path_factory) -> tuple[Path, dict]:
    params = load_params(ROOT / "params.yaml")
    tmp_path = tmp_path_factory.mktemp("speech_export")
    out = tmp_path / "speech_onnx"
    qat = tmp_path / "speech_qat"  # the QAT stage's layout: one model per scheme
    shutil.copytree(tiny_whisper, qat / "int8")
    metrics = run(
        face("speech", "export"),
        params.export,
        params.speech_export,
        tiny_whisper,
        qat,
        out,
        tmp_path / "m.json",
    )
    return out, metrics


def test_speech_variants_load_and_fp32_matches_torch(tiny_whisper, exported):
    from optimum.onnxruntime import ORTModelForSpeechSeq2Seq
    from transformers import WhisperForConditionalGeneration

    out, metrics = exported
    assert metrics["int8_qat"]["status"] == "built" and (out / "int8_qat" / DECODER).is_file()
    assert metrics["int4_qat"]["status"].startswith("not built")
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    # a 32-wide model is mostly graph, not weights: size is asserted on the score model
    assert metrics["int8_ptq"]["bytes"] < metrics["fp32"]["bytes"]
    assert sum(c["fp32_weight_matmuls"] for c in metrics["int8_ptq"]["weight_check"].values()) == 0
    x = torch.randn(3, 80, 100)  # (B, mel bins, frames): 2 x max_source_positions
    kw = {"max_new_tokens": 6, "min_new_tokens": 6, "num_beams": 1, "do_sample": False}
    ref = WhisperForConditionalGeneration.from_pretrained(str(tiny_whisper)).eval()
    with torch.inference_mode():
        expected = ref.generate(x, **kw).tolist()
    for name in ("fp32", "int8_ptq", "int4_ptq"):
        validate_variant(out / name)
        got = ORTModelForSpeechSeq2Seq.from_pretrained(str(out / name)).generate(x, **kw)
        assert got.shape == (3, 6), name
        if name == "fp32":
            assert got.tolist() == expected
    card = (out / "int8_ptq" / "README.md").read_text()
    assert "pipeline_tag: automatic-speech-recognition" in card and "- fr" in card


def test_lean_greedy_loop_gives_the_tokens_of_optimum_generate(exported, loop_spec):
    """Whisper's loop keeps the first step's cross-attention keys/values (the with-past
    branch returns placeholders) and runs the with-past branch as its own session."""
    from sonfolio.bench.loop_runtime import LoopRuntime
    from sonfolio.bench.ort_runtime import OrtRuntime

    out, _ = exported
    spec = loop_spec(out / "int8_ptq", "speech")
    torch.manual_seed(1)
    x = torch.randn(3, 80, 100).numpy()  # (B, mel bins, frames)
    loop, hf = LoopRuntime(spec), OrtRuntime(spec)
    got = loop.generate(x, 6, forced=True)
    assert got == hf.generate(x, 6, forced=True)  # HF Whisper echoes no start token
    assert all(len(g) == 6 and 2 not in g for g in got)


def test_qat_folder_without_a_model_is_named(tmp_path):
    from sonfolio.export.run import sources

    cfg = load_params(ROOT / "params.yaml").export
    (tmp_path / "qat").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no QAT model"):
        sources(cfg, tmp_path / "fp32", tmp_path / "qat")
