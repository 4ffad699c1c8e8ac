"""QAT stages on a trained tiny score model: one plain model folder per scheme, resumable
mid-scheme and across schemes, bad group sizes refused before training."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import run_qat, run_tiny

from sonfolio import qat
from sonfolio.score.model.model import load_trained
from sonfolio.train.ctc import HEAD_FILE
from sonfolio.train.run import Run


@pytest.fixture(scope="module")
def fp32(score_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fp32")
    run_tiny(score_data, out, max_steps=4, eval_every=4)
    return out / "model"


def test_each_scheme_gives_a_plain_model_with_trained_weights(score_data, fp32, tmp_path):
    metrics = run_qat(score_data, fp32, tmp_path)
    assert set(metrics) == {"int8", "int4"}
    base = load_file(str(fp32 / "model.safetensors"))
    for scheme in ("int8", "int4"):
        folder = tmp_path / "qat" / scheme
        assert (folder / "tokenizer.json").is_file()
        assert (folder / "preprocessor_config.json").is_file()
        model = load_trained(folder)
        kinds = {type(m).__name__ for m in model.modules()}
        assert not any(k.startswith("FakeQuantized") for k in kinds)
        assert metrics[scheme]["steps"] == 4
        tuned = load_file(str(folder / "model.safetensors"))
        assert tuned.keys() == base.keys()  # no fake-quant state, no CTC head among them
        moved = [k for k in base if not torch.equal(base[k], tuned[k])]
        assert moved, f"{scheme}: QAT changed no weight"
        # the model reads with its CTC head (score_train.decode: ctc): tuned and saved too
        head, base_head = (load_file(str(f / HEAD_FILE)) for f in (folder, fp32))
        assert not torch.equal(head["weight"], base_head["weight"]), f"{scheme}: head untouched"
        assert torch.equal(model.ctc_head.weight, head["weight"])
    assert not list((tmp_path / "checkpoints" / "score_qat").glob("*/*/step-*"))  # cleaned


def test_qat_by_ctc_alone_tunes_the_encoder_and_head_and_leaves_the_decoder(
    score_data, fp32, tmp_path
):
    """score_qat.ctc_weight: 1 (with a model trained by CTC alone): fake-quantized training
    moves the encoder and the head the model reads with, never the unused decoder."""
    run_qat(score_data, fp32, tmp_path, ctc_weight=1.0, schemes=["int8"])
    base = load_file(str(fp32 / "model.safetensors"))
    tuned = load_file(str(tmp_path / "qat" / "int8" / "model.safetensors"))
    moved = {k.split(".")[0] for k in base if not torch.equal(base[k], tuned[k])}
    assert moved == {"encoder"}
    head, base_head = (load_file(str(f / HEAD_FILE)) for f in (tmp_path / "qat" / "int8", fp32))
    assert not torch.equal(head["weight"], base_head["weight"])


def test_interrupted_qat_resumes_to_the_uninterrupted_weights(
    score_data, fp32, tmp_path, monkeypatch
):
    run_qat(score_data, fp32, tmp_path / "straight", schemes=["int8"])
    step = Run.step

    def crash_at_3(self):
        if self.state.step == 3:
            raise KeyboardInterrupt("simulated crash")
        return step(self)

    monkeypatch.setattr(Run, "step", crash_at_3)
    with pytest.raises(KeyboardInterrupt):
        run_qat(score_data, fp32, tmp_path / "crashed", schemes=["int8"])
    assert not (tmp_path / "crashed" / "qat").exists()  # nothing that looks finished
    monkeypatch.setattr(Run, "step", step)
    metrics = run_qat(score_data, fp32, tmp_path / "crashed", schemes=["int8"])
    assert metrics["int8"]["resumed"] is True
    for file in ("model.safetensors", HEAD_FILE):
        a = load_file(str(tmp_path / "straight" / "qat" / "int8" / file))
        b = load_file(str(tmp_path / "crashed" / "qat" / "int8" / file))
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_finished_scheme_is_not_trained_again_after_a_crash(
    score_data, fp32, tmp_path, monkeypatch
):
    from sonfolio.train import engine

    calls: list[str] = []
    train = engine.train

    def counting(track, cfg, opts, paths):
        calls.append(paths.checkpoints.parent.name)
        if len(calls) == 2 and paths.checkpoints.parent.name == "int4":
            raise KeyboardInterrupt("simulated crash in the second scheme")
        return train(track, cfg, opts, paths)

    monkeypatch.setattr(qat, "train", counting)
    with pytest.raises(KeyboardInterrupt):
        run_qat(score_data, fp32, tmp_path)
    metrics = run_qat(score_data, fp32, tmp_path)
    assert calls == ["int8", "int4", "int4"]  # int8 came back from its done/ folder
    assert set(metrics) == {"int8", "int4"}


def test_int4_group_size_that_does_not_divide_fails_before_training(fp32):
    model = load_trained(fp32)
    with pytest.raises(ValueError, match="int4_group_size"):
        qat.prepare(model, "int4", 128)


def test_qat_without_ctc_loss_is_refused_for_a_model_that_reads_with_its_head(
    score_data, fp32, tmp_path
):
    with pytest.raises(ValueError, match="score_qat.ctc_weight above 0"):
        run_qat(score_data, fp32, tmp_path, ctc_weight=0.0)
    assert not (tmp_path / "qat").exists()


@pytest.mark.parametrize(("bits", "levels"), [(7, (-64, 63)), (8, (-128, 127))])
def test_int8_qat_trains_on_the_grid_the_export_quantizes_to(bits, levels):
    """export.int8_weight_bits: 7 (the default) ships weights within [-64, 64]; QAT must
    simulate that grid, not 8 bits, or what it learned is rounded away at export."""
    linear = torch.nn.Linear(64, 8)
    model = torch.nn.Sequential(linear)
    qat.prepare(model, "int8", 32, bits)
    layer = model[0]
    weight = layer.weight_fake_quantizer(layer.weight).detach()
    steps = weight / (layer.weight.abs().amax(1, keepdim=True) / (2 ** (bits - 1) - 0.5))
    assert torch.allclose(steps, steps.round(), atol=1e-3)  # on the grid
    assert (steps.min().item(), steps.max().item()) == levels
