"""int8 weight formats side by side on this CPU: agreement with FP32 and speed.

    python -m benchmarks.int8_formats [--samples 48] [--repeats 3]

For each track whose FP32 ONNX export exists (${paths.tracks.<track>.export}/fp32, from
`dvc repro export@<track>`), quantizes it three ways into a temporary folder and reads the same
test samples with each, through the project's own ONNX Runtime loop (one thread):
- `int8_w7`: what the export stage ships by default (export.int8_weight_bits: 7): u8 activations
  x s8 weights within [-64, 64] (ORT `reduce_range`);
- `int8_w8`: 8-bit weights within [-127, 127] (export.int8_weight_bits: 8);
- `int8_u8u8`: u8 x u8 (weight_type QUInt8), which does not saturate either (ORT's docs name it
  beside `reduce_range`); not an export option: its tied-embedding sharing is not built, so
  its size is not comparable;
- `int4`: the export's int4 route (MatMulNBits), for reference.

Per format: agreement with the FP32 ONNX model (for a model read by its CTC head, the share of
encoder positions whose best label matches; for an attention decoder, the share of samples whose
first token matches, and whose whole greedy output matches), the error rate against the
references (score TER, speech WER), and end-to-end ms per sample at batch 1 (median, formats
interleaved). The CPU's instruction sets are recorded beside the figures (sonfolio.cpu): on x86
without VNNI, `int8_w8` saturates. Writes benchmarks/results/int8_formats.json, prints a table.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from benchmarks import console
from sonfolio import cpu, int8_weights, tracks, variants
from sonfolio.config.params import Params, load_params
from sonfolio.export.int4 import quantize_int4
from sonfolio.export.int8 import quantize_int8
from sonfolio.export.layout import ONNX_FILES, copy_companions, load_onnx
from sonfolio.export.prepare import prepare_for_quantization
from sonfolio.export.run import quiet_quantizers
from sonfolio.io import read_jsonl, write_json

RESULTS = Path("benchmarks/results/int8_formats.json")
FORMATS = ("int8_w7", "int8_w8", "int8_u8u8", "int4")


def quantize_u8u8(src: Path, dst: Path, per_channel: bool) -> None:
    """u8 activations x u8 weights (asymmetric per channel), every MatMul and Gather."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    copy_companions(src, dst)
    for name in ONNX_FILES:
        quantize_dynamic(
            prepare_for_quantization(load_onnx(src / name)),
            dst / name,
            per_channel=per_channel,
            weight_type=QuantType.QUInt8,
            op_types_to_quantize=["MatMul", "Gather"],
            extra_options={"EnableSubgraph": True},
        )


def build(params: Params, fp32: Path, out: Path) -> dict[str, Path]:
    cfg = params.export
    folders = {name: out / name for name in FORMATS}
    quantize_int8(fp32, folders["int8_w7"], cfg.model_copy(update={"int8_weight_bits": 7}))
    quantize_int8(fp32, folders["int8_w8"], cfg.model_copy(update={"int8_weight_bits": 8}))
    quantize_u8u8(fp32, folders["int8_u8u8"], cfg.per_channel)
    quantize_int4(fp32, folders["int4"], cfg)
    return {"fp32": fp32, **folders}


def inputs(track: Any, data: Path, folder: Path, samples: int) -> tuple[np.ndarray, list]:
    """(model inputs (N, ...) float32, reference texts) for the first test samples, as the
    bench stage makes them (the track's definition, from the model in `folder`)."""
    rows = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "test"][:samples]
    return track.bench_inputs(folder, data, rows)


def measure(
    track: Any, folders: dict[str, Path], x: np.ndarray, refs: list[str], repeats: int, tokens: int
) -> dict[str, dict[str, Any]]:
    """Agreement with FP32, the track's gate metric (score TER, speech WER) and speed, per
    format; `track` is a definition (sonfolio.tracks)."""
    loaded = {name: variants.load(folder, threads=1) for name, folder in folders.items()}
    ctc = loaded["fp32"].loop.__class__.__name__ == "OrtCtc"
    ids = {n: v.loop.generate(x, tokens, False) for n, v in loaded.items()}
    best = {n: np.asarray(v.loop.encode(x)).argmax(-1) for n, v in loaded.items()} if ctc else {}
    times: dict[str, list[float]] = {n: [] for n in loaded}
    for _ in range(repeats):  # formats interleaved, sample by sample
        for i in range(len(x)):
            for name, v in loaded.items():
                start = time.perf_counter()
                v.loop.generate(x[i : i + 1], tokens, False)
                times[name].append(time.perf_counter() - start)
    out = {}
    ref_ids = ids["fp32"]
    for name, v in loaded.items():
        texts = v.tokenizer.batch_decode(ids[name], skip_special_tokens=True)
        metric = track.gate_metric
        error = {metric: track.quality(refs, texts)[metric]}
        same = [a == b for a, b in zip(ids[name], ref_ids, strict=True)]
        first = [a[:1] == b[:1] for a, b in zip(ids[name], ref_ids, strict=True)]
        out[name] = {
            "agreement_sequences": round(sum(same) / len(same), 4),
            "agreement_first_token": round(sum(first) / len(first), 4),
            **error,
            "e2e_ms_p50": round(1e3 * statistics.median(times[name]), 2),
            "int8_weights": int8_weights.int8_weight_range(folders[name]),
        }
        if ctc:
            out[name]["agreement_positions"] = round(float((best[name] == best["fp32"]).mean()), 4)
    fp32_ms = out["fp32"]["e2e_ms_p50"]
    for v in out.values():
        v["speedup_vs_fp32_onnx"] = round(fp32_ms / v["e2e_ms_p50"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=48, help="test samples per track")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    parser.add_argument("--tokens", type=int, default=64, help="decode limit per sample")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON to write")
    parser.add_argument(
        "--emulation",
        default=None,
        help="when run under an emulator that presents another CPU (e.g. `qemu-x86_64 -cpu "
        "Haswell`: AVX2 without VNNI), say so: ONNX Runtime picks its kernels by CPUID, which "
        "the emulator answers, while the recorded flags (/proc/cpuinfo) are the host's, and "
        "the times are the emulator's, not a CPU's",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    quiet_quantizers()
    params = load_params()
    result: dict[str, Any] = {"cpu": cpu.isa(), "samples": args.samples, "tracks": {}}
    if args.emulation:
        result["emulation"] = args.emulation
    for name in params.paths.tracks:
        fp32 = params.paths.track(name).export / "fp32"
        if not (fp32 / ONNX_FILES[0]).is_file():
            print(f"{name}: skipped, no {fp32} (run `dvc repro export@{name}`)")
            continue
        track = tracks.face(name, "bench")
        with tempfile.TemporaryDirectory(prefix="int8_formats-") as tmp:
            folders = build(params, fp32, Path(tmp))
            x, refs = inputs(track, params.paths.track(name).data, fp32, args.samples)
            result["tracks"][name] = measure(track, folders, x, refs, args.repeats, args.tokens)
    write_json(args.out, result)
    caption = result["cpu"]["summary"]
    if args.emulation:
        caption = f"EMULATED: {args.emulation} (times are the emulator's; host: {caption})"
    table = Table(title="int8 formats vs the FP32 ONNX model", caption=caption)
    for col in ("track", "format", "weights", "positions", "first token", "sequences", "error"):
        table.add_column(col)
    table.add_column("e2e ms", justify="right")
    table.add_column("speedup", justify="right")
    for track, formats in result["tracks"].items():
        for name, v in formats.items():
            error = " ".join(f"{k}={v[k]:.3f}" for k in ("ter", "wer") if k in v)
            table.add_row(
                track,
                name,
                cpu.describe(v["int8_weights"]).split(" (")[0] or "-",
                f"{v['agreement_positions']:.3f}" if "agreement_positions" in v else "-",
                f"{v['agreement_first_token']:.3f}",
                f"{v['agreement_sequences']:.3f}",
                error,
                f"{v['e2e_ms_p50']:.1f}",
                f"{v['speedup_vs_fp32_onnx']:.2f}",
            )
    console(150).print(table)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
