"""`sonfolio estimate`: real engine steps on a tiny model, priced on every GPU of the price
table (cost = hours x price, checked by hand for one row); the price file validates; missing
inputs name the stage to run."""

from __future__ import annotations

import json

import pytest
import yaml
from tiny import ROOT, WIDTH, tiny_config

from sonfolio.cli import main
from sonfolio.estimate import (
    ASSUMED,
    MissingInput,
    PriceTableError,
    build_track,
    load_prices,
    matching_gpu,
    measure,
    price_rows,
)
from sonfolio.train.device import Backend
from sonfolio.train.observe import peak_flops

REQUIRED_GPUS = (
    "H100 SXM",
    "H100 PCIe",
    "A100 80GB",
    "A100 40GB",
    "B200",
    "L40S",
    "A10G",
    "V100",
    "RTX 4090",
)


def test_price_file_rows_are_complete():
    table, origin = load_prices(None)
    assert origin.endswith("gpu_prices.yaml")
    names = [g.name for g in table.gpus]
    for required in REQUIRED_GPUS:
        assert any(required in n for n in names), f"{required} missing from {names}"
    for gpu in table.gpus:
        assert 0 < gpu.mfu <= 1 and gpu.peak_bf16_tflops > 0
        for price in gpu.prices:
            assert price.provider and price.usd_per_gpu_hour > 0
            assert price.as_of and price.found
            assert price.source == ASSUMED or price.source.startswith("https://")


def test_price_file_peaks_agree_with_the_engines_mfu_table():
    """The estimate and the training metrics' MFU must use the same peak for a GPU."""
    table, _ = load_prices(None)
    for gpu in table.gpus:
        peak, _ = peak_flops(Backend("cuda", " ".join(gpu.match), None))
        assert peak == gpu.peak_bf16_tflops * 1e12, gpu.name


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM 80GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A10G", "A10G 24GB"),
        ("NVIDIA A10", "A10 24GB"),
        ("NVIDIA L40S", "L40S 48GB"),
        ("NVIDIA L4", "L4 24GB"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090 24GB"),
        ("cpu (2 threads)", None),
    ],
)
def test_a_device_finds_its_own_row(device, expected):
    found = matching_gpu(device, load_prices(None)[0].gpus)
    assert (found.name if found else None) == expected


def test_a_bad_price_row_is_rejected_by_name(tmp_path):
    raw = yaml.safe_load((ROOT / "sonfolio" / "gpu_prices.yaml").read_text())
    raw["gpus"][0]["prices"][0]["source"] = "my friend said so"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(PriceTableError, match="http"):
        load_prices(tmp_path / "p.yaml")
    raw["gpus"][0]["prices"][0].update(source=ASSUMED, usd_per_gpu_hour=0)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(PriceTableError, match="usd_per_gpu_hour"):
        load_prices(tmp_path / "p.yaml")


@pytest.fixture(scope="module")
def tiny_measurement(score_data, tmp_path_factory):
    from sonfolio.score.model.training import ScoreTraining

    cfg, opts = tiny_config()
    track = ScoreTraining(cfg, WIDTH).setup(score_data, score_data / "tokenizer").track
    cache = tmp_path_factory.mktemp("estimate") / "micro_batch.json"
    return measure(track, cfg, opts, steps=2, warmup=1, batch_cache=cache)


def test_measures_real_engine_steps(tiny_measurement):
    m = tiny_measurement
    assert len(m.step_seconds) == 2 and all(s > 0 for s in m.step_seconds)
    assert m.seconds_per_step == pytest.approx(sum(m.step_seconds) / 2)
    assert m.stage == "score_train" and m.effective_batch == 8
    assert m.flops_per_step > 0 and m.parameters > 0
    assert "precision" in m.choices  # the engine's own log of its choices


def test_cost_is_hours_times_price_for_every_row(tiny_measurement):
    m = tiny_measurement
    table, _ = load_prices(None)
    targets = {"max_steps": 1000, "full_run": 50_000}
    rows = price_rows(m, table, targets)
    here = rows[0]
    assert here["speedup_basis"] == "measured" and here["cost_usd"] is None
    assert here["hours"]["max_steps"] == pytest.approx(1000 * m.seconds_per_step / 3600)
    priced = rows[1:]
    assert len(priced) == sum(len(g.prices) for g in table.gpus)
    for r in priced:
        for key, steps in targets.items():
            assert r["hours"][key] == pytest.approx(steps * r["seconds_per_step"] / 3600)
            assert r["cost_usd"][key] == pytest.approx(r["hours"][key] * r["usd_per_gpu_hour"])
        assert r["assumed"] and r["speedup_basis"].startswith("assumed")  # no GPU here
        assert r["price_source"] and r["price_as_of"]
    # one row by hand: Lambda's H100 SXM, 989 TFLOP/s x 35 % MFU + 20 ms per step
    lambda_h100 = next(
        r for r in priced if r["gpu"] == "H100 SXM 80GB" and r["provider"] == "Lambda"
    )
    seconds = m.flops_per_step / (989e12 * 0.35) + 0.020
    assert lambda_h100["seconds_per_step"] == pytest.approx(seconds)
    assert lambda_h100["cost_usd"]["full_run"] == pytest.approx(50_000 * seconds / 3600 * 3.78)
    assert lambda_h100["speedup"] == pytest.approx(m.seconds_per_step / seconds)


def _missing(params, track, **paths):
    return params.model_copy(update={"paths": params.paths.with_track(track, **paths)})


def test_missing_inputs_name_the_stage_to_run(params, score_data, tmp_path):
    with pytest.raises(MissingInput, match="data@score"):
        build_track("score", _missing(params, "score", data=tmp_path / "none"))
    with pytest.raises(MissingInput, match="tokenizer@score"):
        build_track(
            "score",
            _missing(params, "score", data=score_data, tokenizer=tmp_path / "none"),
        )
    with pytest.raises(MissingInput, match="data@speech"):
        build_track("speech", _missing(params, "speech", data=tmp_path / "none"))


def test_estimate_command_json_and_metrics_file(score_data, tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["paths"]["tracks"]["score"].update(
        data=str(score_data), tokenizer=str(score_data / "tokenizer")
    )
    raw["paths"].update(
        checkpoints=str(tmp_path / "checkpoints"),
        metrics=str(tmp_path / "metrics"),
    )
    raw["score_data"]["image_long_side"] = WIDTH
    raw["score_train"]["model"].update(image_height=32, patch=[32, 8])
    raw["score_train"]["effective_batch"] = 8
    raw["estimate"].update(steps=1, warmup_steps=1)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    argv = ["estimate", "--params", str(tmp_path / "params.yaml"), "--track", "score"]
    assert main([*argv, "--json", "--out", "--target-steps", "100"]) == 0
    report = json.loads(capsys.readouterr().out)
    track = report["tracks"]["score"]
    assert track["targets"] == {
        "max_steps": 100,
        "full_run": raw["estimate"]["full_run_steps"]["score"],
    }
    assert len(track["step_seconds"]) == 1 and track["seconds_per_step"] > 0
    # what the estimate stage writes: one file per track (tasks/estimate.py)
    assert json.loads((tmp_path / "metrics" / "estimate_score.json").read_text()) == report


def test_estimate_command_fails_naming_the_stage(tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["paths"]["tracks"]["score"]["data"] = str(tmp_path / "none")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    assert main(["estimate", "--params", str(tmp_path / "params.yaml"), "--track", "score"]) == 2
    assert "dvc repro data@score" in capsys.readouterr().err
    assert main(["estimate", "--steps", "0"]) == 2
    assert "--steps = 0" in capsys.readouterr().err


def test_on_a_gpu_its_own_row_is_measured_and_others_scale_by_peak():
    """No GPU needed: a measurement as one taken on an H100 would be."""
    from sonfolio.estimate import Measurement

    m = Measurement(
        track="score",
        stage="score_train",
        backend="cuda",
        device="NVIDIA H100 80GB HBM3",
        precision="bf16",
        parameters=10**8,
        effective_batch=64,
        micro_batch=64,
        accumulation=1,
        warmup_steps=1,
        step_seconds=[0.5, 0.7],
        flops_per_step=1e15,
    )
    table, _ = load_prices(None)
    rows = {(r["gpu"], r["provider"]): r for r in price_rows(m, table, {"a": 100, "b": 200})}
    own = rows[("H100 SXM 80GB", "Lambda")]
    assert own["speedup_basis"].startswith("measured") and not own["assumed"]
    assert own["seconds_per_step"] == pytest.approx(0.6) and own["speedup"] == pytest.approx(1)
    a100 = rows[("A100 40GB", "Lambda")]
    assert a100["assumed"] and a100["seconds_per_step"] == pytest.approx(0.6 * 989 / 312)
