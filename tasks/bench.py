"""Stage bench: every variant of a track on the same test samples, in one run.

Run:    dvc repro bench      (every track: bench@score, bench@speech; or
        python -m tasks.bench score)
Reads:  params.yaml (bench, <track>_bench, export.quantize, <track>_train.decode_max_tokens,
        paths), ${paths.tracks.<track>.data}/ (test split), ${paths.tracks.<track>.model}/
        (torch FP32), ${paths.tracks.<track>.export}/<variant>/ (ONNX variants)
Writes: ${paths.metrics}/<track>_bench.json: per variant size, peak RSS, latency (encoder ms,
        decoder ms per token, end to end; p50, p95), throughput at batch 1 and batch N, the
        track's quality (score: symbol error rate TER; speech: WER and CER on normalised
        text), its increase over torch FP32 and the gate status, and the conditions; with a
        peer engine (speech: CTranslate2 int8), latency_vs_ctranslate2

Variants: torch FP32, torch bf16 (where the device has it), ORT fp32 / int8 / int4 (PTQ, and
QAT once exported), each also through the plain greedy loop (bench.lean_loop). What differs
between tracks (inputs, quality, gate, peer engines) the track's face says; how each
figure is measured, sonfolio.bench.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import AutoTokenizer

from sonfolio import tracks
from sonfolio.bench.case import Case
from sonfolio.bench.peer import (
    SAMPLE_RATE,
    clip_audio,
    count_loops,
    decoder_prompt,
    peer_cases,
    whisper_tokenizer,
)
from sonfolio.bench.run import Track, bench_track, finish
from sonfolio.bench.torch_runtime import bf16_support
from sonfolio.config.bench import Bench, BenchParams
from sonfolio.config.export import Export
from sonfolio.config.stage import load_sections
from sonfolio.export.layout import file_sizes, variant_names
from sonfolio.io import read_jsonl
from sonfolio.logs import setup_logging

if TYPE_CHECKING:
    from sonfolio.config.params import Params  # what benchmarks/quant.py passes

log = logging.getLogger(__name__)


def torch_cases(model: Path) -> tuple[list[Case], dict[str, str]]:
    """torch FP32, and bf16 where the device computes it natively (else why not)."""
    cases = [Case("torch_fp32", "torch", str(model))]
    ok, reason = bf16_support()
    log.info("torch bf16: %s", reason)
    if ok:
        return [*cases, Case("torch_bf16", "torch", str(model), "bf16")], {}
    return cases, {"torch_bf16": f"not measured: {reason}"}


def onnx_cases(
    export_cfg: Export, export_dir: Path, lean_loop: bool, optimum_rows: str | None = None
) -> tuple[list[Case], dict[str, str]]:
    """ORT variants through optimum's ORTModel (`ort_*`) unless `optimum_rows` names the key
    that turned them off, and through the plain greedy loop (`ortloop_*`) when `lean_loop`;
    absent folders named with the reason."""
    cases, absent = [], {}
    for name in variant_names(export_cfg):
        folder = export_dir / name
        runtimes = ["ortloop"] if lean_loop else []
        if optimum_rows:
            absent[f"ort_{name}"] = f"not measured: {optimum_rows} is false"
        else:
            runtimes.insert(0, "ort")
        for runtime in runtimes:
            if folder.is_dir():
                kind = "ort_loop" if runtime == "ortloop" else "ort"
                cases.append(Case(f"{runtime}_{name}", kind, str(folder)))
            else:
                absent[f"{runtime}_{name}"] = f"not built: no {folder} (run the export stage)"
    return cases, absent


def sizes_of(cases: list[Case]) -> dict[str, int]:
    def size(case: Case) -> int:
        folder = Path(case.folder)
        if case.runtime in ("ort", "ort_loop"):
            return file_sizes(folder)["bytes"]
        if case.runtime in ("ct2", "faster_whisper"):  # the weights, as the ONNX rows count
            return (folder / "model.bin").stat().st_size
        per_param = 2 if case.dtype == "bf16" else 1  # bf16 halves the FP32 file in memory
        return sum(f.stat().st_size for f in folder.glob("*.safetensors")) // per_param

    return {c.name: size(c) for c in cases}


def run(
    track: Any,
    cfg: Bench,
    gate: Any,
    export_cfg: Export,
    decode_max_tokens: int,
    data: Path,
    model: Path,
    export_dir: Path,
    metrics_path: Path,
) -> dict[str, Any]:
    """Measure every variant of `track` (its face, sonfolio.tracks.face) and the peer engines
    it asks for; write and return the metrics. `gate` is the track's `<track>_bench` section.

    Raises:
        ValueError: the manifest has no test rows.
        QualityGateFailed (sonfolio.bench.run): past the gate's allowance, with fail_on_gate set.
    """
    stage = f"bench@{track.name}"
    tok = AutoTokenizer.from_pretrained(str(model))
    rows = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "test"][: cfg.samples]
    if not rows:
        raise ValueError(f"{data}/manifest.jsonl has no test rows: rerun data@{track.name}")
    inputs, refs = track.bench_inputs(model, data, rows)
    cases, absent = torch_cases(model)
    off = None if gate.optimum_rows else f"{track.name}_bench.optimum_rows"
    more, gone = onnx_cases(export_cfg, export_dir, cfg.lean_loop, off)
    cases, absent = cases + more, {**absent, **gone}

    seconds: list[float] | None = None

    def score(outputs: list[list[int]]) -> dict[str, Any]:
        texts = tok.batch_decode(outputs, skip_special_tokens=True)
        loops = {"loops": count_loops(texts, seconds)} if seconds else {}
        return track.quality(refs, texts) | loops

    with tempfile.TemporaryDirectory(prefix=f"bench-{track.name}-") as tmp:
        prompt = decoder_prompt(model, tok.bos_token_id)
        peers, not_measured = track.bench_peers(gate)
        base = track.bench_peer_base(gate) if "faster_whisper_base" in peers else None
        more, converted, gone = peer_cases(peers, model, Path(tmp), base)
        cases += more  # the conversion's prompt (CT2's) becomes every runtime's: outputs compare
        prompt = converted or prompt
        absent.update({**not_measured, **gone})
        audio = None
        if any(c.runtime == "faster_whisper" for c in cases):  # it takes audio, not features
            audio = clip_audio(data, rows)
            seconds = [len(a) / SAMPLE_RATE for a in audio]
        bench = Track(
            name=track.name,
            stage=stage,
            cases=cases,
            sizes=sizes_of(cases),
            absent=absent,
            inputs=inputs,
            quality_tokens=track.quality_tokens(model, decode_max_tokens),
            prompt=prompt,
            eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id,
            gate_metric=track.gate_metric,
            max_increase=track.max_increase(gate),
            audio=audio,
            sample_rate=SAMPLE_RATE,
            features_from=model,
            model_suppress=whisper_tokenizer(model),  # the model's suppress lists, as HF's
        )
        metrics, failures = bench_track(bench, cfg, score, Path(tmp))
    return finish(metrics, failures, cfg, metrics_path, stage)


def run_with_params(params: BenchParams | Params, name: str) -> dict[str, Any]:
    """`run` for track `name` with its inputs as params.yaml gives them: the stage's wiring,
    which benchmarks/quant.py runs too."""
    paths = params.paths.track(name)
    return run(
        tracks.face(name, "bench"),
        params.bench,
        params.section(name, "bench"),
        params.export,
        params.section(name, "train").decode_max_tokens,
        paths.data,
        paths.model,
        paths.export,
        params.paths.metrics / f"{name}_bench.json",
    )


def main() -> None:
    setup_logging()
    run_with_params(load_sections(BenchParams), tracks.from_argv(sys.argv[1:], "bench"))


if __name__ == "__main__":
    main()
