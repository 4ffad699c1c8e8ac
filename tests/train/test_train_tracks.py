"""Both tracks train through the real stage code: 2 steps with pinned losses, outputs that
later stages load, corrupt samples skipped, counted and capped, and NaN recovery."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import ROOT, TWO_STEPS, WIDTH, run_tiny, tiny_config
from transformers import (
    AutoFeatureExtractor,
    AutoTokenizer,
    VisionEncoderDecoderModel,
    WhisperForConditionalGeneration,
)

from sonfolio.io import read_jsonl, write_jsonl
from sonfolio.train.run import TooManyBadSamples
from sonfolio.train.stability import TrainingDiverged

# pinned (the conv encoder), per score_train.ctc_weight: a change here is a change in what
# training computes. None: the default's (1, CTC alone); 0.7: the hybrid loss
SCORE_LOSSES = {None: [57.9105, 22.386], 0.7: [42.2003, 17.1282]}
SPEECH_LOSSES = [10.4896, 9.6347]  # with speech_train.ctc_pool: 2
# whisper-base, 4 of 6 encoder blocks frozen, the decoder's attention to the audio training, lr 1e-4
BASE_LOSSES = [3.6417, 2.7685]


def losses(metrics_history: list[dict]) -> list[float]:
    return [round(r["train/loss"], 4) for r in metrics_history if "train/loss" in r]


@pytest.mark.parametrize("ctc_weight", list(SCORE_LOSSES))
def test_score_two_steps_pinned(score_data, tmp_path, ctc_weight):
    loop = {} if ctc_weight is None else {"ctc_weight": ctc_weight}
    metrics = run_tiny(score_data, tmp_path, **loop)
    assert metrics["steps"] == 2
    assert metrics["step_time"]["data_wait_pct"] >= 0
    history = (tmp_path / "live" / "plots" / "metrics" / "train" / "loss.tsv").read_text()
    got = [round(float(line.split("\t")[1]), 4) for line in history.splitlines()[1:]]
    assert got == pytest.approx(SCORE_LOSSES[ctc_weight], rel=1e-3)
    model = VisionEncoderDecoderModel.from_pretrained(tmp_path / "model")
    assert model.config.encoder.image_size == [32, WIDTH]
    AutoTokenizer.from_pretrained(tmp_path / "model")
    assert "heldout_ter" in metrics and "test_ter" in metrics
    for split in ("heldout", "test"):  # each collection's TER, over every system of the split
        by = metrics[f"{split}_ter_by_collection"]
        assert sum(c["systems"] for c in by.values()) == metrics[f"{split}_systems"]
    assert not (tmp_path / "checkpoints" / "score_train").exists() or not any(
        (tmp_path / "checkpoints" / "score_train").iterdir()
    )


def test_score_jitter_reaches_the_train_batches(score_data, tmp_path):
    """score_train.jitter on: the two steps train on moved images (other losses than the
    pinned ones), and the run still ends with a model and its figures."""
    from tiny import tiny_config

    cfg, _ = tiny_config()
    metrics = run_tiny(score_data, tmp_path, jitter=cfg.jitter.model_copy(update={"enabled": True}))
    history = (tmp_path / "live" / "plots" / "metrics" / "train" / "loss.tsv").read_text()
    got = [round(float(line.split("\t")[1]), 4) for line in history.splitlines()[1:]]
    assert metrics["steps"] == 2 and len(got) == 2
    assert got != pytest.approx(SCORE_LOSSES[None], rel=1e-3)


def test_score_train_reports_what_the_saved_model_reads(score_data, tmp_path):
    """decode: ctc (params.yaml): the held-out figures come from the CTC head, which is saved
    beside the model; the saved folder, loaded as every later stage loads it, reads the
    held-out systems exactly as score_train reported."""
    from sonfolio import variants
    from sonfolio.io import read_jsonl
    from sonfolio.score.model.batches import load_image, to_pixel_values
    from sonfolio.train.ctc import HEAD_FILE

    metrics = run_tiny(score_data, tmp_path, decode_max_tokens=8)
    assert metrics["decode"] == "ctc" and (tmp_path / "model" / HEAD_FILE).is_file()
    variant = variants.load(tmp_path / "model", threads=1, device="cpu")
    rows = [r for r in read_jsonl(score_data / "manifest.jsonl") if r["split"] == "test"][:3]
    pixels = to_pixel_values(
        np.stack([load_image(score_data / r["image"], 32, WIDTH) for r in rows])
    )
    reported = [e["hyp"] for e in metrics["test_examples"]]
    assert [e["ref"] for e in metrics["test_examples"]] == [r["text"] for r in rows]
    assert variant.generate(pixels, 8) == reported

    attention = run_tiny(score_data, tmp_path / "attention", decode="attention")
    assert attention["decode"] == "attention"
    assert not (tmp_path / "attention" / "model" / HEAD_FILE).exists()  # the head: training only


def test_ctc_alone_trains_the_encoder_and_head_and_leaves_the_decoder(score_data, tmp_path):
    """ctc_weight: 1: the loss is the CTC head's alone, so the decoder (which a model read by
    its head never runs) keeps its first weights while the encoder and the head learn, and the
    saved folder still reads the held-out systems as the stage reported."""
    from safetensors.torch import load_file

    from sonfolio import variants
    from sonfolio.score.model.batches import load_image, to_pixel_values
    from sonfolio.train.ctc import HEAD_FILE

    first = run_tiny(score_data, tmp_path / "first", max_steps=1, ctc_weight=1.0)
    metrics = run_tiny(score_data, tmp_path / "ctc", ctc_weight=1.0, decode_max_tokens=8)
    assert first["steps"] == 1 and metrics["steps"] == 2
    before = load_file(tmp_path / "first" / "model" / "model.safetensors")
    after = load_file(tmp_path / "ctc" / "model" / "model.safetensors")
    decoder = [k for k in after if k.startswith("decoder.")]
    encoder = [k for k in after if k.startswith("encoder.") and after[k].is_floating_point()]
    assert decoder and all(torch.equal(before[k], after[k]) for k in decoder)
    assert any(not torch.equal(before[k], after[k]) for k in encoder)
    head_before = load_file(tmp_path / "first" / "model" / HEAD_FILE)
    head_after = load_file(tmp_path / "ctc" / "model" / HEAD_FILE)
    assert any(not torch.equal(head_before[k], head_after[k]) for k in head_after)
    variant = variants.load(tmp_path / "ctc" / "model", threads=1, device="cpu")
    rows = [r for r in read_jsonl(score_data / "manifest.jsonl") if r["split"] == "test"][:3]
    pixels = to_pixel_values(
        np.stack([load_image(score_data / r["image"], 32, WIDTH) for r in rows])
    )
    assert variant.generate(pixels, 8) == [e["hyp"] for e in metrics["test_examples"]]


@pytest.mark.parametrize(
    ("preset", "processor", "losses"),
    [("from scratch", "processor", SPEECH_LOSSES), ("whisper-base", "processor_base", BASE_LOSSES)],
)
def test_speech_two_steps_pinned(speech_data, params, scratch, tmp_path, preset, processor, losses):
    """Two steps of the from-scratch tiny Whisper, and two of the default: the installed
    whisper-base fine-tuned with its lower encoder frozen and its window cut to 8 s."""
    from sonfolio.speech.model.training import SpeechTraining
    from tasks.train import run

    chosen = scratch if preset == "from scratch" else params
    cfg = chosen.speech_train.model_copy(update=TWO_STEPS)
    metrics = run(
        "speech",
        SpeechTraining(cfg),
        params.engine_options("default"),
        speech_data / "data",
        speech_data / processor,
        tmp_path / "model",
        tmp_path / "m.json",
        tmp_path / "ckpt",
        tmp_path / "live",
    )
    history = (tmp_path / "live" / "plots" / "metrics" / "train" / "loss.tsv").read_text()
    got = [round(float(line.split("\t")[1]), 4) for line in history.splitlines()[1:]]
    assert got == pytest.approx(losses, rel=1e-3)
    model = WhisperForConditionalGeneration.from_pretrained(tmp_path / "model")
    assert model.config.max_source_positions == 400  # 8 s window: 800 frames / 2
    AutoFeatureExtractor.from_pretrained(tmp_path / "model")
    rows = (speech_data / "data" / "manifest.jsonl").read_text().splitlines()
    assert metrics["test_clips"] == sum('"split": "test"' in r for r in rows) > 0  # none dropped
    if preset == "whisper-base":  # what is kept holds the base's weights, what trains moved
        from safetensors.torch import load_file

        from sonfolio.speech.model.bases import resolve

        base = load_file(Path(resolve(chosen.speech_train.model.base_model)) / "model.safetensors")
        tuned = model.state_dict()
        for kept in ("model.encoder.layers.0.fc1.weight", "model.decoder.layers.0.fc1.weight"):
            assert torch.equal(tuned[kept], base[kept])
        for moved in (
            "model.encoder.layers.5.fc1.weight",
            "model.decoder.layers.0.encoder_attn.q_proj.weight",
        ):
            assert not torch.equal(tuned[moved], base[moved])


@pytest.fixture
def corrupt_data(score_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(score_data, data)
    (data / "images" / "train" / "005.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    return data


def test_a_corrupt_image_is_skipped_and_counted(corrupt_data, tmp_path):
    metrics = run_tiny(corrupt_data, tmp_path / "run", max_steps=6, max_skip_fraction=0.05)
    assert metrics["corrupt_samples_skipped"] == 1


def test_corrupt_images_past_the_cap_fail(corrupt_data, tmp_path):
    with pytest.raises(TooManyBadSamples, match="max_skip_fraction"):
        run_tiny(corrupt_data, tmp_path / "run", max_steps=6, max_skip_fraction=0.0)


def nan_after(monkeypatch, first: int, count: int) -> None:
    """Training losses first..first+count-1 (1-based) are NaN: the engine's own loss (Run.loss),
    whichever it is (CTC alone, the default, or joint with the decoder's cross-entropy)."""
    from sonfolio.train.run import Run

    original = Run.loss
    calls = {"n": 0}

    def loss(self, model, batch):
        out = original(self, model, batch)
        if model.training:
            calls["n"] += 1
            if first <= calls["n"] < first + count:
                out = out * torch.tensor(float("nan"))
        return out

    monkeypatch.setattr(Run, "loss", loss)


def test_injected_nans_are_skipped_then_rolled_back(score_data, tmp_path, monkeypatch):
    nan_after(monkeypatch, first=5, count=3)
    metrics = run_tiny(score_data, tmp_path, max_steps=8, checkpoint_every=2, eval_every=4)
    assert metrics["nan_skipped_steps"] == 3
    assert metrics["nan_rollbacks"] == 1
    assert metrics["lr_scale"] == pytest.approx(0.5**3)
    assert metrics["steps"] == 8
    assert torch.isfinite(torch.tensor(metrics["train_loss_last"]))
    model = VisionEncoderDecoderModel.from_pretrained(tmp_path / "model")
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_nans_that_keep_coming_fail_with_advice(score_data, tmp_path, monkeypatch):
    nan_after(monkeypatch, first=3, count=100)
    cfg, opts = tiny_config()
    guard = opts.nan_guard.model_copy(update={"max_rollbacks": 1})
    with pytest.raises(TrainingDiverged, match="lower"):
        run_tiny(
            score_data, tmp_path, max_steps=12, checkpoint_every=1, engine={"nan_guard": guard}
        )


@pytest.mark.parametrize(
    ("loop", "fix"),
    [
        ({"engine": {"precision": "fp16"}}, "precision: auto"),
        ({"model": {"size": "base"}}, "size: tiny"),
    ],
)
def test_what_the_cpu_cannot_do_fails_before_training(score_data, tmp_path, loop, fix):
    from sonfolio.train.device import DeviceCannotDo

    with pytest.raises(DeviceCannotDo, match=fix):
        run_tiny(score_data, tmp_path, **loop)
    assert not (tmp_path / "checkpoints").exists()  # nothing was started


def test_compiled_run_saves_the_plain_model(score_data, tmp_path):
    """train_engine.compile: true (inductor, on the CPU here): the best weights are saved under
    the model's own names, not torch.compile's wrapper's, with the CTC head beside them, and
    they are the weights the eager run trains, to float tolerance (without dropout: inductor
    draws its masks from the RNG otherwise)."""
    from safetensors.torch import load_file

    from sonfolio.train import ctc

    # the ViT encoder: with the conv encoder's batch norms, inductor's float differences
    # reach gradients that are noise, and AdamW steps those weights apart by up to 2 x lr
    # (measured: up to 0.4 % of a cross-attention weight's values) whatever the saving does
    model = {"dropout": 0.0, "encoder": "vit"}
    eager = run_tiny(score_data, tmp_path / "eager", model=model)
    compiled = run_tiny(score_data, tmp_path / "compiled", engine={"compile": True}, model=model)
    assert compiled["choices"]["compile"].startswith("on"), compiled["choices"]["compile"]
    saved = {}
    for run in ("eager", "compiled"):
        saved[run] = load_file(tmp_path / run / "model" / "model.safetensors")
        saved[run] |= load_file(tmp_path / run / "model" / ctc.HEAD_FILE)
    assert not [k for k in saved["compiled"] if k.startswith("_orig_mod")]
    assert saved["compiled"].keys() == saved["eager"].keys()
    for name, weight in saved["eager"].items():
        torch.testing.assert_close(saved["compiled"][name], weight, atol=1e-3, rtol=1e-2)
    assert compiled["val_loss_last"] == pytest.approx(eager["val_loss_last"], rel=1e-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU they run: test_train_gpu.py")
@pytest.mark.parametrize("preset", ["memory", "all"])
def test_gpu_presets_train_on_the_cpu(score_data, tmp_path, preset):
    """`dvc exp run -S score_train.preset=all` on a machine without a GPU trains: every GPU-only
    option (8-bit AdamW, FP8) falls back with its reason in the choices, and the rest (compile,
    gradient checkpointing, auto micro-batch) run."""
    from sonfolio.config.params import load_params

    opts = load_params(ROOT / "params.yaml").engine_options(preset)
    metrics = run_tiny(
        score_data, tmp_path, engine={k: getattr(opts, k) for k in type(opts).model_fields}
    )
    choices = metrics["choices"]
    assert choices["optimizer"].startswith("AdamW: adamw_8bit unavailable"), choices["optimizer"]
    assert choices["gradient_checkpointing"].startswith("on"), choices["gradient_checkpointing"]
    if preset == "all":
        assert choices["fp8"].startswith("skipped"), choices["fp8"]
        assert choices["compile"].startswith("on"), choices["compile"]
    assert np.isfinite(metrics["val_loss_last"])


@pytest.mark.parametrize("split", ["val", "test"])
def test_a_manifest_missing_a_split_fails_naming_the_stage_or_trains(score_data, tmp_path, split):
    """No val rows: the message names the stage that makes them, before any step; no test
    rows (an eval split): training runs and the empty split reads nothing."""
    data = tmp_path / "data"
    shutil.copytree(score_data, data)
    rows = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] != split]
    write_jsonl(data / "manifest.jsonl", rows)
    if split == "val":
        with pytest.raises(ValueError, match="needs train and val rows: rerun `dvc repro"):
            run_tiny(data, tmp_path)
    else:
        assert run_tiny(data, tmp_path, max_steps=1)["steps"] == 1
