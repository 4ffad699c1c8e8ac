"""Quantized variants side by side: size, latency, memory and quality per track and variant.

    python -m benchmarks.quant [--reuse]

Runs the bench stage for every track (tasks.bench's `run_with_params`; the exported
variants under ${paths.tracks.<track>.export} must exist: run the export stage first), or
with `--reuse` reads the metrics it last wrote. Writes
benchmarks/results/quant.json (per track and variant: the bench figures plus `size_ratio`,
`speedup_vs_torch_fp32` and, for speech, `latency_vs_ctranslate2`; the targets and whether
each int8 variant meets them; the conditions, load average included) and prints a table.
For a track the bench measured faster-whisper on (speech with Whisper's own tokenizer:
`faster_whisper_finetuned`, the same weights in CTranslate2 int8), also
`latency_vs_faster_whisper`, `rss_vs_faster_whisper` (peak resident memory of the two rows'
worker processes) and `size_ratio` (vs_faster_whisper), with the rows and fields they came
from.

Targets (issue 6): int8 files <= 0.28x the FP32 size; int8 end-to-end generation >= 2x faster
than torch FP32; speech int8 latency <= 1.25x CTranslate2 int8 on the same decode length.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks import console
from sonfolio import cpu
from sonfolio.config.params import Params, load_params
from sonfolio.io import write_json
from sonfolio.logs import setup_logging

RESULTS = Path("benchmarks/results/quant.json")
TARGETS = {"int8_size_ratio_max": 0.28, "int8_speedup_min": 2.0, "int8_vs_ct2_max": 1.25}


def run_benches(params: Params) -> dict[str, dict[str, Any]]:
    from tasks.bench import run_with_params

    return {track: run_with_params(params, track) for track in params.paths.tracks}


def read_benches(params: Params) -> dict[str, dict[str, Any]]:
    out = {}
    for track in params.paths.tracks:
        path = params.paths.metrics / f"{track}_bench.json"
        if not path.is_file():
            raise SystemExit(f"{path} not found: run `dvc repro bench@{track}` first")
        out[track] = json.loads(path.read_text())
    return out


def targets(variants: dict[str, Any], onnx_ratio: float | None) -> dict[str, Any]:
    """Whether the int8 PTQ variant meets each target, through optimum's generate (`ort_`) and
    through the plain greedy loop (`ortloop_`); absent ones are left out."""
    result: dict[str, Any] = {
        "int8_size_ratio_to_onnx_fp32": onnx_ratio,
        "size_met": onnx_ratio is not None and onnx_ratio <= TARGETS["int8_size_ratio_max"],
    }
    for name in ("ort_int8_ptq", "ortloop_int8_ptq"):
        v = variants.get(name, {})
        if "e2e_ms_p50" not in v:
            continue
        result[f"{name}_speedup_met"] = v["speedup_vs_torch_fp32"] >= TARGETS["int8_speedup_min"]
        if "latency_vs_ctranslate2" in v:  # a track with a CTranslate2 peer (speech)
            met = v["latency_vs_ctranslate2"] <= TARGETS["int8_vs_ct2_max"]
            result[f"{name}_vs_ct2_met"] = met
    return result


LOOP_INT8 = ("ortloop_int8_ptq", "ortloop_int8_qat")  # our int8 rows through the greedy loop
FASTER_WHISPER = "faster_whisper_finetuned"
_BATCH1 = "rss_peak_batch1_mb"


def vs_faster_whisper(variants: dict[str, Any]) -> dict[str, Any] | None:
    """Our best int8 loop row against faster-whisper on the same weights, or None without a
    faster-whisper row: `latency_vs_faster_whisper` = that row's e2e p50 / faster-whisper's
    (end to end with feature extraction, where the rows have it: faster-whisper's includes its
    own), `size_ratio` = that row's bytes / the ONNX FP32 export's; `from` names the fields."""
    fw = variants.get(FASTER_WHISPER, {})
    ours = [n for n in LOOP_INT8 if "e2e_ms_p50" in variants.get(n, {})]
    if "e2e_ms_p50" not in fw or not ours:
        return None
    key = "e2e_with_features_ms_p50" if "e2e_with_features_ms_p50" in fw else "e2e_ms_p50"
    best = min(ours, key=lambda n: variants[n].get(key, variants[n]["e2e_ms_p50"]))
    fp32 = next(n for n in ("ortloop_fp32", "ort_fp32") if "bytes" in variants.get(n, {}))
    return {
        "latency_vs_faster_whisper": round(variants[best][key] / fw[key], 4),
        "size_ratio": round(variants[best]["bytes"] / variants[fp32]["bytes"], 4),
        # each row's worker process's peak resident memory (VmHWM), imports included, before
        # the batch phase: faster-whisper's transcribe takes one clip (its "batch" runs them one
        # after another), so this is where both have done the same work; at_batch: the whole
        # run's peak, ours holding a batch's encoder states and cross-attention cache at once
        "rss_vs_faster_whisper": round(
            variants[best][_BATCH1] / fw.get(_BATCH1, fw["rss_peak_mb"]), 4
        ),
        "rss_vs_faster_whisper_at_batch": round(
            variants[best]["rss_peak_mb"] / fw["rss_peak_mb"], 4
        ),
        "from": {
            "ours": f"{best}.{key}",
            "faster_whisper": f"{FASTER_WHISPER}.{key}",
            "size": f"{best}.bytes / {fp32}.bytes",
            "rss": f"{best}.{_BATCH1} / {FASTER_WHISPER}.{_BATCH1}",
            "rss_at_batch": f"{best}.rss_peak_mb / {FASTER_WHISPER}.rss_peak_mb",
            "note": "best (lowest) e2e of the int8 rows through our greedy loop "
            f"({', '.join(LOOP_INT8)}); faster-whisper's e2e includes its feature extraction, "
            "ours adds our numpy log-mel features' per clip (e2e_with_features)",
        },
    }


def summary(benches: dict[str, dict[str, Any]], params: Params) -> dict[str, Any]:
    result: dict[str, Any] = {"targets": TARGETS, "tracks": {}}
    for track, metrics in benches.items():
        export = params.paths.metrics / f"{track}_export.json"
        ratio = None
        if export.is_file():
            ratio = json.loads(export.read_text()).get("int8_ptq", {}).get("size_ratio")
        variants = metrics["variants"]
        result["tracks"][track] = {
            "variants": variants,
            "conditions": metrics["conditions"],
            "gate_failures": metrics.get("gate_failures", []),
            "targets_met": targets(variants, ratio),
        }
        ratios = vs_faster_whisper(variants)
        if ratios is not None:
            result["tracks"][track] |= ratios
    result["load_average_at_report"] = cpu.load_average()
    result["cpu"] = cpu.isa()  # int8 / int4 speed and quality depend on VNNI / AMX / DOTPROD
    return result


def table(result: dict[str, Any]) -> Table:
    t = Table(
        title="Quantized variants (p50; ratios to torch FP32)", caption=result["cpu"]["summary"]
    )
    for col in (
        "track",
        "variant",
        "MB",
        "size x",
        "enc ms",
        "dec ms/tok",
        "e2e ms (+feat)",
        "speedup",
        "vs CT2",
        "RSS MB (b1)",
        "quality",
        "gate",
    ):
        t.add_column(col, justify="right" if col not in ("track", "variant") else "left")
    for track, data in result["tracks"].items():
        for name, v in data["variants"].items():
            if "e2e_ms_p50" not in v:
                t.add_row(track, name, *[""] * 9, v.get("status", "").split(":")[0])
                continue
            quality = " ".join(f"{k}={v[k]:.3f}" for k in ("ter", "wer", "cer") if k in v)
            quality += f" loops={v['loops']}" if "loops" in v else ""
            t.add_row(
                track,
                name,
                f"{v['bytes'] / 1e6:.2f}",
                f"{v['size_ratio']:.2f}",
                f"{v['encoder_ms_p50']:.1f}",
                # a model read by its CTC head takes no decoder steps
                "CTC" if v.get("decoding") == "ctc" else f"{v['decoder_ms_per_token_p50']:.2f}",
                # with feature extraction where measured (faster-whisper's e2e includes it)
                f"{v.get('e2e_with_features_ms_p50', v['e2e_ms_p50']):.1f}",
                f"{v['speedup_vs_torch_fp32']:.2f}",
                f"{v['latency_vs_ctranslate2']:.2f}" if "latency_vs_ctranslate2" in v else "",
                f"{v['rss_peak_mb']:.0f} ({v.get('rss_peak_batch1_mb', 0):.0f})",
                quality,
                v["status"],
            )
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reuse", action="store_true", help="read the benches' last metrics")
    args = parser.parse_args()
    setup_logging(logging.WARNING)
    params = load_params()
    benches = read_benches(params) if args.reuse else run_benches(params)
    result = summary(benches, params)
    write_json(RESULTS, result)
    screen = console(150)
    screen.print(table(result))
    for track, data in result["tracks"].items():
        screen.print(f"{track}: targets {data['targets_met']}; conditions {data['conditions']}")
        if "latency_vs_faster_whisper" in data:
            screen.print(
                f"{track} vs faster-whisper (same weights): latency "
                f"{data['latency_vs_faster_whisper']:.2f}x, peak RSS "
                f"{data['rss_vs_faster_whisper']:.2f}x clip by clip "
                f"({data['rss_vs_faster_whisper_at_batch']:.2f}x with our batch phase), "
                f"size {data['size_ratio']:.2f}x "
                f"of ONNX FP32; from {data['from']}"
            )
    screen.print(f"written: {RESULTS}")


if __name__ == "__main__":
    main()
