"""sonfolio.variants: a PyTorch folder and its ONNX export load alike and decode alike; a
missing or corrupt file fails with its name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from eval_tiny import SHAPE, WINDOW_S, export, save_score, save_speech

from sonfolio import variant_eval, variants
from sonfolio.config.params import Params


@pytest.fixture(scope="module")
def score_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("score_variants")
    torch_dir = save_score(root / "score_fp32")
    onnx_dir = export(torch_dir, root / "onnx" / "fp32", "image-to-text-with-past")
    return torch_dir, onnx_dir


@pytest.fixture(scope="module")
def speech_dirs(params: Params, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("speech_variants")
    torch_dir = save_speech(root / "speech_fp32", params)
    frames = WINDOW_S * 100  # mel frames: the exported time axis is static
    onnx_dir = export(
        torch_dir,
        root / "onnx" / "fp32",
        "automatic-speech-recognition-with-past",
        nb_max_frames=frames,
    )
    return torch_dir, onnx_dir


def test_score_torch_and_onnx_load_and_decode_alike(score_dirs):
    torch_dir, onnx_dir = score_dirs
    a = variants.load(torch_dir, threads=1, device="cpu")
    b = variants.load(onnx_dir, threads=1)
    assert (a.name, a.kind, a.track, a.device) == ("score_fp32", "torch", "score", "cpu")
    assert (b.name, b.kind, b.track, b.device) == ("fp32", "onnx", "score", "CPUExecutionProvider")
    assert b.processor.size == {"height": SHAPE[0], "width": SHAPE[1]}
    pixels = torch.rand(2, 1, *SHAPE)  # (B, 1, H, W), ink = 1 as in score.batches
    out = a.generate(pixels, max_new_tokens=5)
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
    assert b.loop is not None  # the plain ORT greedy loop decodes a CPU ONNX variant...
    assert b.generate(pixels, max_new_tokens=5) == out
    b.loop = None  # ...and gives what optimum's generate gives
    assert b.generate(pixels, max_new_tokens=5) == out


def test_speech_torch_and_onnx_load_and_decode_alike(speech_dirs):
    torch_dir, onnx_dir = speech_dirs
    a = variants.load(torch_dir, threads=1, device="cpu")
    b = variants.load(onnx_dir, threads=1)
    assert (a.kind, a.track, b.kind, b.track) == ("torch", "speech", "onnx", "speech")
    audio = [torch.randn(16000).numpy() * 0.1, torch.randn(8000).numpy() * 0.1]
    feats = a.processor(audio, sampling_rate=16000, return_tensors="np")["input_features"]
    assert feats.shape == (2, 80, WINDOW_S * 100)
    out = a.generate(feats, max_new_tokens=4)
    assert len(out) == 2
    assert b.loop is not None
    assert b.generate(feats, max_new_tokens=4) == out
    b.loop = None
    assert b.generate(feats, max_new_tokens=4) == out


def test_a_generation_config_beyond_one_start_token_keeps_hf_generate(score_dirs, tmp_path):
    import json
    import shutil

    _, onnx_dir = score_dirs
    folder = shutil.copytree(onnx_dir, tmp_path / "prompted")
    path = folder / "generation_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "forced_decoder_ids": [[1, 5]]}))
    assert variants.load(folder, threads=1).loop is None


def test_max_new_tokens_is_capped_by_the_decoder_length(score_dirs):
    a = variants.load(score_dirs[0], device="cpu")
    # n_positions is the tokenizer's 64 here: asking for 10,000 tokens must not overflow it
    assert variants.decoder_positions(a.model.config) == 64
    (text,) = a.generate(torch.rand(1, 1, *SHAPE), max_new_tokens=10_000)
    assert len(a.tokenizer(text, add_special_tokens=False)["input_ids"]) <= 64


def test_discover_lists_fp32_then_each_export(score_dirs, tmp_path):
    torch_dir, onnx_dir = score_dirs
    assert variants.discover(torch_dir, None) == [torch_dir]
    assert variants.discover(torch_dir, tmp_path / "absent") == [torch_dir]
    (onnx_dir.parent / "empty").mkdir(exist_ok=True)  # no model file: not a variant
    assert variants.discover(torch_dir, onnx_dir.parent) == [torch_dir, onnx_dir]


def copy_of(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


# (0: the PyTorch folder, 1: its ONNX export; the files removed, the first of which the folder
# had; what the error says)
MISSING = [
    (
        1,
        ("decoder_model_merged.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"),
        "decoder_model_merged.onnx is missing",
    ),
    (1, ("encoder_model.onnx",), "encoder_model.onnx is missing"),
    (0, ("tokenizer.json",), "tokenizer.json is missing"),
    (0, ("model.safetensors",), "neither model.safetensors"),
]


@pytest.mark.parametrize(("which", "removed", "named"), MISSING)
def test_a_missing_file_is_named(score_dirs, tmp_path, which, removed, named):
    broken = copy_of(score_dirs[which], tmp_path / "broken")
    (broken / removed[0]).unlink()
    for name in removed[1:]:  # the unmerged decoders, where the export wrote them too
        (broken / name).unlink(missing_ok=True)
    with pytest.raises(variants.VariantError, match=named):
        variants.load(broken)


def test_corrupt_onnx_file_is_named(score_dirs, tmp_path):
    broken = copy_of(score_dirs[1], tmp_path / "corrupt")
    path = broken / "decoder_model_merged.onnx"
    path.write_bytes(path.read_bytes()[:1000])  # truncated, as by a full disk
    with pytest.raises(
        variants.VariantError, match=r"decoder_model_merged\.onnx is not a (readable|valid) ONNX"
    ):
        variants.load(broken)


def test_a_missing_folder_or_a_config_of_no_model_is_named(score_dirs, tmp_path):
    with pytest.raises(variants.VariantError, match="is not a folder"):
        variants.load(tmp_path / "nothing")
    broken = copy_of(score_dirs[0], tmp_path / "no_model_config")
    (broken / "config.json").write_text("{}")
    with pytest.raises(variants.VariantError, match="config.json is not a model config"):
        variants.load(broken)


def test_variant_deltas_are_measured_against_the_reference():
    per = {
        "fp32": {"splits": {"test": {"ser": 0.25}}},
        "int8": {"splits": {"test": {"ser": 0.3}}},
    }
    variant_eval.add_deltas(per, "fp32", ("ser",))
    assert per["fp32"]["splits"]["test"]["delta_ser"] == 0.0
    assert per["int8"]["splits"]["test"]["delta_ser"] == pytest.approx(0.05)


def test_eval_rows_are_the_same_seeded_subset():
    rows = [{"split": "test", "i": i} for i in range(50)] + [{"split": "val", "i": 99}]
    a = variant_eval.eval_rows(rows, "test", 10, seed=0)
    assert a == variant_eval.eval_rows(rows, "test", 10, seed=0)
    assert len(a) == 10 and [r["i"] for r in a] == sorted(r["i"] for r in a)
    assert variant_eval.eval_rows(rows, "test", None, seed=0) == rows[:50]
