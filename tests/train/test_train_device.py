"""Device, precision and model-size choices: automatic ones carry their reason, impossible
ones fail before training with what to change."""

from __future__ import annotations

import pytest
import torch
from tiny import ROOT

from sonfolio.config.params import load_params
from sonfolio.score.model.model import check_size
from sonfolio.train import device, speed
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


def test_auto_loading_decodes_once_where_the_set_fits_on_any_device():
    for backend in (CPU, NEW_GPU):
        workers, preload, why = speed.loader_workers("auto", backend, 1.9, 8.0)
        assert (workers, preload) == (0, True)
        assert "1.90 GiB <= train_engine.preload_max_gib 8" in why


def test_auto_loading_too_large_to_preload_gets_workers_on_a_gpu_only():
    workers, preload, why = speed.loader_workers("auto", NEW_GPU, 40.0, 8.0)
    assert workers >= 1 and not preload and "40.00 GiB > train_engine.preload_max_gib 8" in why
    workers, preload, why = speed.loader_workers("auto", CPU, 40.0, 8.0)
    assert (workers, preload) == (0, False) and "decoded per step in the main process" in why
    rule = speed.loader_workers("auto", CPU, None, 8.0)[2]  # sonfolio doctor: no data read
    assert rule.startswith("decoded once into memory when train + val fit in")
    assert speed.loader_workers(3, NEW_GPU, 1.0, 8.0)[:2] == (3, False)  # as configured


def test_decoded_size_counts_the_arrays_of_a_readable_sample():
    sample = {"index": 0, "pixel_values": torch.zeros(1, 96, 640), "labels": [1, 2, 3]}
    broken = {"index": 0, "error": "unreadable"}
    assert speed.decoded_gib([broken, sample] * 512) == pytest.approx(1024 * 96 * 640 * 4 / 2**30)
