"""Device, precision and model-size choices: automatic ones carry their reason, impossible
ones fail before training with what to change."""

from __future__ import annotations

import pytest
from tiny import ROOT

from sonfolio.config.params import load_params
from sonfolio.score.model.model import check_size
from sonfolio.train import device
from sonfolio.train.device import Backend, DeviceCannotDo, choose_precision, hsa_override

CPU = Backend("cpu", "cpu (2 threads)", None)
OLD_GPU = Backend("cuda", "Tesla V100-SXM2-16GB", (7, 0))
NEW_GPU = Backend("cuda", "NVIDIA H100 80GB HBM3", (9, 0))


def test_cpu_trains_in_fp32_and_says_why():
    precision, reason = choose_precision("auto", CPU)
    assert precision == "no"
    assert "CPU" in reason and "fp32" in reason


def test_fp16_on_cpu_fails_with_the_fix():
    with pytest.raises(DeviceCannotDo, match="precision: auto"):
        choose_precision("fp16", CPU)


def test_gpu_choices(monkeypatch):
    monkeypatch.setattr(device, "bf16_supported", lambda b: b.capability >= (8, 0))
    assert choose_precision("auto", NEW_GPU)[0] == "bf16"
    precision, reason = choose_precision("auto", OLD_GPU)
    assert precision == "fp16" and "loss scaling" in reason
    with pytest.raises(DeviceCannotDo, match="fp16"):
        choose_precision("bf16", OLD_GPU)


def test_hsa_override_only_where_the_target_needs_it():
    assert hsa_override(["gfx1031"], {})[0] == "10.3.0"
    assert hsa_override(["gfx90a"], {})[0] is None  # MI200: supported as it is
    assert hsa_override(["gfx1031"], {"HSA_OVERRIDE_GFX_VERSION": "9.0.0"})[0] is None


def test_gpu_model_size_on_cpu_fails_before_training():
    with pytest.raises(DeviceCannotDo, match="size: tiny"):
        check_size("score_train", "base", CPU)
    check_size("score_train", "tiny", CPU)


def test_presets_are_checked_when_params_load(tmp_path):
    import yaml

    from sonfolio.config.base import ParamsError

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["train_presets"]["typo"] = {"micro_bach": 4}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError, match="train_presets.typo"):
        load_params(tmp_path / "p.yaml")
    raw["train_presets"].pop("typo")
    raw["score_train"]["preset"] = "fastest"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError, match="score_train.preset = 'fastest'"):
        load_params(tmp_path / "p.yaml")
