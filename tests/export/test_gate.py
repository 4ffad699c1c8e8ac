"""The quality gate marks a variant that lost too much, and fails the stage when asked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sonfolio.bench.run import QualityGateFailed, Track, _compare, finish
from sonfolio.config.params import load_params


def _variants(ter_int8: float) -> dict:
    base = {"bytes": 100, "e2e_ms_p50": 10.0, "_outputs": [[1, 2], [3]]}
    return {
        "torch_fp32": {**base, "ter": 0.30},
        "ort_int8_ptq": {**base, "bytes": 26, "e2e_ms_p50": 4.0, "ter": ter_int8},
    }


def _track(max_increase: float) -> Track:
    return Track("score", "bench@score", [], {}, {}, np.zeros(1), 8, [1], 2, 0, "ter", max_increase)


def test_within_gate_passes_and_ratios_are_to_torch_fp32():
    variants = _variants(0.31)
    assert _compare(variants, _track(0.02)) == []
    int8 = variants["ort_int8_ptq"]
    assert int8["status"] == "passed"
    assert int8["size_ratio"] == 0.26 and int8["speedup_vs_torch_fp32"] == 2.5
    assert int8["agreement_with_torch_fp32"] == 1.0


@pytest.mark.parametrize("fail_on_gate", [False, True])
def test_past_gate_is_marked_and_fails_when_configured(tmp_path, fail_on_gate):
    variants = _variants(0.40)
    failures = _compare(variants, _track(0.02))
    assert variants["ort_int8_ptq"]["status"] == "failed"
    assert variants["torch_fp32"]["status"] == "passed"
    assert len(failures) == 1 and "ort_int8_ptq" in failures[0] and "0.4000" in failures[0]
    cfg = load_params().bench.model_copy(update={"fail_on_gate": fail_on_gate})
    path = tmp_path / "bench.json"
    if fail_on_gate:
        with pytest.raises(QualityGateFailed, match="ort_int8_ptq: ter 0.4000 vs torch FP32"):
            finish({"variants": {}}, failures, cfg, path, "bench@score")
        assert not path.exists()
    else:
        finish({"variants": {}}, failures, cfg, path, "bench@score")
        assert json.loads(path.read_text())["gate_failures"] == failures


def test_outputs_compare_without_prompt_end_token_or_padding():
    from sonfolio.bench.run import _clean

    track = _track(0.02)  # prompt [1], end of text 2, pad 0
    assert _clean([1, 7, 8, 2, 0, 0], track) == [7, 8]  # HF echoes the start token
    assert _clean([7, 8, 0, 0], track) == [7, 8]  # HF Whisper: no end token, padded
    assert _clean([7, 8, 2, 2], track) == [7, 8]  # the plain loop fills with end tokens
