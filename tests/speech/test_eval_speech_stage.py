"""Stage eval@speech end to end on a tiny trained Whisper and its ONNX export, on clips made by
the real speech_data stage: WER/CER per variant, split and voice, worst examples with audio."""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path

import pytest
from eval_tiny import export, quality_csv, save_speech

from sonfolio.config.params import Params
from sonfolio.io import read_jsonl
from sonfolio.speech.common.audio import decode
from sonfolio.speech.steps.eval import FACE as TRACK
from tasks.eval import run

PER_SPLIT = 4


@pytest.fixture(scope="module")
def evaluated(params: Params, speech_dataset: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("speech_eval")
    rows = read_jsonl(speech_dataset / "manifest.jsonl")
    train = [r for r in rows if r["split"] == "train"][:4]
    window = params.speech_tokenizer.chunk_length_s  # every clip fits (speech_data checks it)
    torch_dir = save_speech(
        root / "speech_fp32",
        params,
        window_s=window,
        texts=[r["text"] for r in train],
        audio=[decode(speech_dataset / r["audio"]) for r in train],
        steps=5,
        corpus=[r["text"] for r in rows],
    )
    onnx_dir = export(
        torch_dir,
        root / "onnx" / "int8_like",
        "automatic-speech-recognition-with-past",
        nb_max_frames=window * 100,
    )
    cfg = params.speech_eval.model_copy(
        update={
            "splits": ["test", "val"],
            "max_samples": PER_SPLIT,
            "decode_max_tokens": 8,
            "threads": 1,
            "worst_examples": 2,
            "batch_size": 2,
        }
    )
    out = root / "eval"
    metrics = run(cfg, TRACK, speech_dataset, [torch_dir, onnx_dir], out, root / "metrics.json")
    return metrics, out, root, rows


@pytest.mark.slow
def test_wer_cer_per_variant_split_and_voice(evaluated):
    metrics, _, root, rows = evaluated
    assert json.loads((root / "metrics.json").read_text()) == metrics
    assert metrics["reference"] == "speech_fp32"
    assert list(metrics["variants"]) == ["speech_fp32", "int8_like"]
    for entry in metrics["variants"].values():
        for split in ("test", "val"):
            m = entry["splits"][split]
            assert m["clips"] == PER_SPLIT
            assert m["wer"] >= 0.0 and m["cer"] >= 0.0
            voices = {r["speaker"] for r in rows if r["split"] == split}
            assert set(m["per_voice"]) <= voices
            assert sum(v["clips"] for v in m["per_voice"].values()) == PER_SPLIT
            assert "delta_wer" in m and "delta_cer" in m
            # its interval, over the voices the split holds (one voice: over the clips)
            held = len(set(m["per_voice"]))
            over = f"{held} voices" if held > 1 else f"{PER_SPLIT} clips"
            assert m["wer_ci95_over"] == over
            low, high = m["wer_ci95"]
            assert low <= m["wer"] <= high
    onnx = metrics["variants"]["int8_like"]["splits"]["test"]
    assert onnx["delta_wer"] == pytest.approx(0.0, abs=1e-9)  # same weights, same transcripts


@pytest.mark.slow
def test_worst_examples_name_their_audio(evaluated):
    metrics, out, _, _ = evaluated
    worst = metrics["variants"]["speech_fp32"]["splits"]["test"]["worst"]
    assert len(worst) == 2 and worst[0]["wer"] >= worst[1]["wer"]
    for w in worst:
        assert Path(w["audio"]).is_file() and w["audio"].endswith(".wav")
    preds = read_jsonl(out / "samples" / "speech_fp32" / "test" / "predictions.jsonl")
    assert len(preds) == PER_SPLIT
    assert all(p["ref_norm"] == p["ref_norm"].lower() for p in preds)  # normalised


@pytest.mark.slow
def test_quality_csv_for_dvc_plots(evaluated):
    _, out, _, _ = evaluated
    runs = list(product(("speech_fp32", "int8_like"), ("test", "val")))  # variant-major
    assert [(r["variant"], r["split"]) for r in quality_csv(out)] == runs
