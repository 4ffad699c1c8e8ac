"""The CPU's instruction sets for int8 / int4 inference, and whether an int8 ONNX model keeps
its accuracy on it.

ONNX Runtime's dynamic int8 MatMul (MatMulInteger, DynamicQuantizeMatMul) multiplies uint8
activations by int8 weights. On x86 CPUs with VNNI (AVX512-VNNI, AVX-VNNI) or AMX, and on ARM
(SDOT/UDOT, I8MM), the products accumulate in 32 bits. On x86 without them (AVX2 and AVX-512
without VNNI) ORT uses VPMADDUBSW, which adds each pair of products into a *saturating* 16-bit
integer: with activations up to 255, a pair exceeds 32767 once the two weights' magnitudes sum
past 128. Weights kept within [-64, 64] (ORT's `reduce_range`, "7-bit") never saturate, on any
CPU; 8-bit weights (up to 127) give wrong sums on AVX2-only CPUs (docs/export.md measures it).

Read from /proc/cpuinfo on Linux and `sysctl` on macOS; elsewhere the flags are unknown (and
said to be). Written here because neither torch nor onnxruntime exposes VNNI / AMX / DOTPROD.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

# |weight| at most this: a u8 x s8 pair sums to at most 2 * 255 * 64 = 32640 <= 32767
SAFE_INT8_WEIGHT = 64
_X86_FLAGS = {  # our name: the flags (Linux names; macOS's upper-case ones mapped below)
    "avx2": ("avx2",),
    "avx512": ("avx512f",),
    "avx512_vnni": ("avx512_vnni",),
    "avx_vnni": ("avx_vnni",),
    "amx_int8": ("amx_int8",),
}
_ARM_FLAGS = {"neon": ("asimd", "neon"), "dotprod": ("asimddp",), "i8mm": ("i8mm",)}
_MAC_X86 = {"AVX2": "avx2", "AVX512F": "avx512f", "AVX512VNNI": "avx512_vnni"}
_MAC_ARM = {
    "hw.optional.neon": "asimd",
    "hw.optional.arm.FEAT_DotProd": "asimddp",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
}


def _linux_flags() -> tuple[str, set[str]]:
    """(model name, flags) from /proc/cpuinfo: x86 `flags`, ARM `Features`."""
    model, flags = "", set()
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        return model, flags
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Hardware") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, flags


def _mac_flags() -> tuple[str, set[str]]:
    def sysctl(name: str) -> str:
        try:
            done = subprocess.run(
                ["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip()

    model = sysctl("machdep.cpu.brand_string")
    flags = set()
    words = f"{sysctl('machdep.cpu.features')} {sysctl('machdep.cpu.leaf7_features')}"
    for word in words.split():
        if word in _MAC_X86:
            flags.add(_MAC_X86[word])
    flags |= {flag for key, flag in _MAC_ARM.items() if sysctl(key) == "1"}
    return model, flags


@functools.cache
def isa() -> dict[str, Any]:
    """This CPU's int8-relevant instruction sets: {"arch", "model", "known", each flag of
    _X86_FLAGS / _ARM_FLAGS as a bool, "int8_saturates", "summary"} (flags False where
    unknown; `known` says whether they could be read)."""
    arch = platform.machine().lower()
    system = platform.system()
    model, flags = _mac_flags() if system == "Darwin" else _linux_flags()
    x86 = arch in ("x86_64", "amd64", "i386", "i686")
    table = _X86_FLAGS if x86 else _ARM_FLAGS
    found = {name: any(f in flags for f in names) for name, names in table.items()}
    out: dict[str, Any] = {
        "arch": arch,
        "model": model or platform.processor() or arch,
        "known": bool(flags),
        **found,
    }
    out["int8_saturates"] = saturates(out)
    out["summary"] = summary(out)
    return out


def saturates(cpu: dict[str, Any]) -> bool | None:
    """Whether ORT's u8 x s8 int8 MatMul saturates on `cpu` (an `isa()` dict): x86 without
    VNNI or AMX. None where the flags are unknown."""
    if not cpu.get("known"):
        return None
    if cpu["arch"] not in ("x86_64", "amd64", "i386", "i686"):
        return False  # ARM: SDOT/UDOT or widening multiplies, 32-bit sums
    return not (cpu.get("avx512_vnni") or cpu.get("avx_vnni") or cpu.get("amx_int8"))


def summary(cpu: dict[str, Any]) -> str:
    """One line: "x86_64 AMD EPYC 7B13: AVX2; no AVX-512, no VNNI, no AMX"."""
    if not cpu.get("known"):
        return f"{cpu['arch']} {cpu['model']}: instruction sets unknown (no /proc/cpuinfo)"
    table = _X86_FLAGS if cpu["arch"] in ("x86_64", "amd64", "i386", "i686") else _ARM_FLAGS
    names = {
        "avx2": "AVX2",
        "avx512": "AVX-512",
        "avx512_vnni": "AVX512-VNNI",
        "avx_vnni": "AVX-VNNI",
        "amx_int8": "AMX-INT8",
        "neon": "NEON",
        "dotprod": "DOTPROD",
        "i8mm": "I8MM",
    }
    has = [names[k] for k in table if cpu.get(k)]
    lacks = [names[k] for k in table if not cpu.get(k)]
    text = f"{cpu['arch']} {cpu['model']}: {', '.join(has) or 'none of ' + ', '.join(lacks)}"
    if has and lacks:
        text += f"; no {', no '.join(lacks)}"
    return text


def describe(weights: dict[str, Any] | None) -> str:
    """An `int8_weight_range` result in words: "7-bit (max |w| 64 of 127; no saturation on
    any CPU)", or "" for a folder with no int8 MatMul."""
    if not weights:
        return ""
    if not weights["signed"]:
        return "unsigned 8-bit (u8 x u8 MatMul: no saturation on any CPU)"
    where = "no saturation on any CPU" if weights["bits"] == 7 else "needs VNNI, AMX or ARM"
    return f"{weights['bits']}-bit (max |w| {weights['max_abs']} of 127; {where})"


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded: how busy the machine was."""
    return [round(x, 2) for x in os.getloadavg()]


def run_conditions(load_before: list[float]) -> dict[str, Any]:
    """What a measurement ran on, written once for every benchmark's JSON: the cores, the CPU
    and its int8 instruction sets (speed and int8 figures depend on them), and the load
    averages before (`load_before`, from `load_average()`) and now."""
    return {
        "cpus": os.cpu_count(),
        "cpu": isa(),
        "machine": platform.processor() or platform.machine(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }


def peak_rss_mb() -> float:
    """Peak RSS of this process's address space, MiB.

    /proc's VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over across execve, so
    a worker started by a parent holding 400 MB of torch would report at least that.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    import resource  # POSIX only: imported where /proc is absent

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: macOS, in bytes
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)
