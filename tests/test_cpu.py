"""sonfolio.cpu: the instruction sets read from this machine, and which CPUs saturate ORT's
u8 x s8 int8 MatMul."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from sonfolio import cpu, int8_weights

X86 = {"arch": "x86_64", "model": "test", "known": True, "avx2": True, "avx512": False}
X86 |= {"avx512_vnni": False, "avx_vnni": False, "amx_int8": False}


@pytest.mark.parametrize(
    ("flags", "saturates"),
    [
        ({}, True),  # AVX2 only (AMD before Zen 4, Intel desktops before Alder Lake)
        ({"avx512": True}, True),  # AVX-512 without VNNI (Skylake-SP)
        ({"avx512": True, "avx512_vnni": True}, False),  # Cascade Lake, Zen 4
        ({"avx_vnni": True}, False),  # Alder Lake
        ({"avx512": True, "avx512_vnni": True, "amx_int8": True}, False),  # Sapphire Rapids
    ],
)
def test_x86_without_vnni_or_amx_saturates(flags, saturates):
    assert cpu.saturates(X86 | flags) is saturates


def test_arm_never_saturates_and_unknown_flags_say_so():
    arm = {"arch": "aarch64", "model": "test", "known": True, "neon": True, "dotprod": False}
    assert cpu.saturates(arm) is False
    unknown = {"arch": "x86_64", "model": "test", "known": False}
    assert cpu.saturates(unknown) is None
    assert "unknown" in cpu.summary(unknown)


def test_summary_names_what_the_cpu_has_and_lacks():
    text = cpu.summary(X86)
    assert text.startswith("x86_64 test: AVX2;") and "no AVX512-VNNI" in text


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="reads Linux's /proc/cpuinfo")
def test_this_machine_is_read_from_proc_cpuinfo():
    found = cpu.isa()
    assert found["known"] and found["arch"] == platform.machine().lower()
    flags = Path("/proc/cpuinfo").read_text().split()
    if found["arch"] == "x86_64":
        assert found["avx2"] is ("avx2" in flags)
        assert found["avx512_vnni"] is ("avx512_vnni" in flags)
        assert found["int8_saturates"] is not any(
            f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8")
        )
    assert found["summary"].startswith(found["arch"])


def _int8_folder(folder: Path, top: int) -> Path:
    """A folder with one ONNX file: a MatMulInteger whose int8 weight reaches `top`."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.clip(np.arange(-top, top + 1), -128, 127).astype(np.int8).reshape(-1, 1)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, len(weight)])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])],
        [numpy_helper.from_array(weight, "w")],
    )
    folder.mkdir(parents=True)
    onnx.save(helper.make_model(graph), str(folder / "encoder_model.onnx"))
    return folder


def test_int8_weight_range_reads_the_files(tmp_path):
    assert int8_weights.int8_weight_range(_int8_folder(tmp_path / "a", 64))["bits"] == 7
    eight = int8_weights.int8_weight_range(_int8_folder(tmp_path / "b", 127))
    assert eight == {"max_abs": 127, "bits": 8, "signed": True, "matmuls": 1}
    assert int8_weights.int8_weight_range(tmp_path) is None  # no ONNX file: nothing to say
    assert "needs VNNI" in cpu.describe(eight)


def test_doctor_warns_for_an_eight_bit_int8_model_on_a_cpu_that_saturates(
    params, tmp_path, monkeypatch, capsys
):
    """`sonfolio doctor` checks the tracks' int8 exports and any --model folder; on a CPU
    without VNNI (here made so) it warns for 8-bit weights and names the fix."""
    from sonfolio.cli import main
    from sonfolio.doctor import int8_models

    monkeypatch.setattr(cpu, "isa", lambda: X86 | {"int8_saturates": True, "summary": "avx2"})
    export = tmp_path / "score_onnx"
    _int8_folder(export / "int8_ptq", 64)
    eight = _int8_folder(tmp_path / "mine", 127)
    paths = params.paths.with_track("score", export=export)
    found = int8_models(params.model_copy(update={"paths": paths}), ["score"], [eight])
    assert [m["folder"] for m in found] == [str(eight), str(export / "int8_ptq")]
    assert "export.int8_weight_bits: 7" in found[0]["warning"] and found[1]["warning"] is None
    monkeypatch.setattr(cpu, "isa", lambda: X86 | {"avx512_vnni": True, "summary": "vnni"})
    assert int8_models(params, [], [eight])[0]["warning"] is None
    assert main(["doctor", "--track", "score", "--json", "--model", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
