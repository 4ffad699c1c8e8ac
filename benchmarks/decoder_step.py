"""What fusing the with-past step's self-attention gives the greedy loop: the same ONNX
variants of the speech track decoded by sonfolio.infer.ortloop.OrtGreedy with its decoder's
with-past branch as exported and with it fused (sonfolio.export.decoder_step.joint_decoder),
same clips, one run, interleaved.

Run:    python -m benchmarks.decoder_step [--root RUN] [--variants fp32 int8_ptq int4_ptq]
        [--clips 8] [--rounds 5] [--new 32] [--threads 2]
Reads:  RUN/params.yaml (paths), the speech data stage's manifest and test audio, and the
        exported variants under paths.tracks.speech.export
Writes: benchmarks/results/decoder_step.json and prints a table: per variant, the ms a clip
        (p50 over clips x rounds: encoder, first step and `--new` - 1 forced with-past steps,
        batch 1) plain and fused, their ratio, the ONNX nodes of the step before and after
        ONNX Runtime's own optimizations, whether the fused run's tokens equal the plain
        run's, and the CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from rich.table import Table

from benchmarks import console
from sonfolio import cpu, prompt
from sonfolio.config.sections import Sections, parse_sections, read_yaml
from sonfolio.export import decoder_step
from sonfolio.export.layout import DECODER
from sonfolio.export.with_past import with_past_decoder
from sonfolio.infer.ortloop import OrtGreedy
from sonfolio.io import read_jsonl, write_json

RESULTS = Path("benchmarks/results/decoder_step.json")


def features(folder: Path, data: Path, clips: int) -> np.ndarray:
    """The first `clips` test clips as the variant's feature extractor makes them."""
    import soundfile
    from transformers import WhisperFeatureExtractor

    rows = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "test"][:clips]
    audio = [soundfile.read(data / r["audio"], dtype="float32")[0] for r in rows]
    extractor = WhisperFeatureExtractor.from_pretrained(str(folder))
    return extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="np")[
        "input_features"
    ]


class _Plain(OrtGreedy):
    fuse_attention = False  # the joint decoder built at opening, its attention as exported


def loops(folder: Path, threads: int) -> dict[str, OrtGreedy]:
    """The loop over `folder` with the with-past step as exported ("plain") and fused."""
    return {
        name: kind(folder, threads, 1, True, prompt.read(folder))
        for name, kind in (("plain", _Plain), ("fused", OrtGreedy))
    }


def nodes(folder: Path) -> dict[str, int]:
    """Nodes of the with-past step (the joint decoder's with-past branch), plain and fused, as
    written and as ORT runs it alone."""
    step = with_past_decoder(onnx.load(str(folder / DECODER)))
    heads = next(
        i.type.tensor_type.shape.dim[1].dim_value
        for i in step.graph.input
        if i.name.startswith("past_key_values")
    )
    fused, blocks = decoder_step.fuse_self_attention(step, heads)
    out = {"fused_blocks": blocks}
    for name, model in (("plain", step), ("fused", fused)):
        real = [n for n in model.graph.node if n.op_type != "Constant"]
        out[f"{name}_nodes"] = len(real)
        out[f"{name}_nodes_after_ort"] = _optimized_nodes(model)
    return out


def _optimized_nodes(model: onnx.ModelProto) -> int:
    """Nodes of the graph ONNX Runtime runs after its own optimizations (the loop's level)."""
    import tempfile

    import onnxruntime

    with tempfile.TemporaryDirectory() as tmp:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(tmp) / "step.onnx")
        onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return len(onnx.load(options.optimized_model_filepath).graph.node)


def measure(made: dict[str, OrtGreedy], x: np.ndarray, new: int, rounds: int) -> dict[str, Any]:
    """ms a clip per loop, interleaved round by round; the tokens of each."""
    times: dict[str, list[float]] = {name: [] for name in made}
    tokens = {name: loop.generate(x, new, forced=True) for name, loop in made.items()}
    for _ in range(rounds):
        for name, loop in made.items():
            for i in range(len(x)):
                start = time.perf_counter()
                loop.generate(x[i : i + 1], new, forced=True)
                times[name].append(1000 * (time.perf_counter() - start))
    out: dict[str, Any] = {
        f"{name}_ms_p50": round(float(np.median(t)), 2) for name, t in times.items()
    }
    out["fused_over_plain"] = round(out["fused_ms_p50"] / out["plain_ms_p50"], 4)
    out["same_tokens_clips"] = sum(a == b for a, b in zip(*tokens.values(), strict=True))
    out["clips"] = len(x)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the pipeline run")
    parser.add_argument("--variants", nargs="+", default=["fp32", "int8_ptq", "int4_ptq"])
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new", type=int, default=32, help="forced tokens a clip")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    params_file = args.root / "params.yaml"
    paths = parse_sections(Sections, read_yaml(params_file), str(params_file)).paths
    speech = paths.track("speech")
    export, data = args.root / speech.export, args.root / speech.data
    missing = [v for v in args.variants if not (export / v / DECODER).is_file()]
    if missing or not (data / "manifest.jsonl").is_file():
        sys.exit(
            f"benchmarks.decoder_step: needs the speech track's exported variants {missing} "
            f"under {export} and its data manifest under {data}: run the pipeline first "
            "(dvc repro export@speech), or pass --root"
        )
    load_before = cpu.load_average()
    result: dict[str, Any] = {"variants": {}}
    for variant in args.variants:
        folder = export / variant
        x = features(folder, data, args.clips)
        result["variants"][variant] = {
            **measure(loops(folder, args.threads), x, args.new, args.rounds),
            **nodes(folder),
        }
    result["conditions"] = {
        "root": str(args.root),
        "new_tokens": args.new,
        "rounds": args.rounds,
        "threads": args.threads,
        "decoder_threads": 1,
        "spin": True,
        **cpu.run_conditions(load_before),
    }
    write_json(args.out, result)
    print_table(result)
    print(f"wrote {args.out}")


def print_table(result: dict[str, Any]) -> None:
    c = result["conditions"]
    table = Table(
        title=f"with-past step plain vs self-attention fused ({c['new_tokens']} forced tokens, "
        f"batch 1, {c['threads']} threads, decoder 1)"
    )
    for col in ("variant", "plain ms", "fused ms", "fused / plain", "nodes (ORT)", "same tokens"):
        table.add_column(col)
    for name, r in result["variants"].items():
        table.add_row(
            name, f"{r['plain_ms_p50']:.1f}", f"{r['fused_ms_p50']:.1f}",
            f"{r['fused_over_plain']:.3f}",
            f"{r['plain_nodes_after_ort']} -> {r['fused_nodes_after_ort']}",
            f"{r['same_tokens_clips']}/{r['clips']}",
        )  # fmt: skip
    console().print(table)
    load = f"{c['load_average_before']} -> {c['load_average_after']}"
    print(f"CPU: {c['cpu']['summary']}; load average {load}")


if __name__ == "__main__":
    main()
