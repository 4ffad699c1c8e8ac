"""Stage score_bench: every score variant on the same test systems, in one run.

Run:    dvc repro score_bench      (or: python -m tasks.score_bench)
Reads:  params.yaml (bench, score_bench, export.quantize, score_train.decode_max_tokens, paths),
        ${paths.track("score").data}/ (test split), ${paths.track("score").model}/ (torch FP32),
        ${paths.track("score").export}/<variant>/ (ONNX variants)
Writes: ${paths.metrics}/score_bench.json: per variant size, peak RSS, latency (encoder ms,
        decoder ms per token, end to end; p50, p95), throughput at batch 1 and batch N, symbol
        error rate (TER), its increase over torch FP32 and the gate status, and the conditions

Variants: torch FP32, torch bf16 (where the device has it), ORT fp32 / int8 / int4 (PTQ, and
QAT once exported). See sonfolio/bench.py for how each figure is measured.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from transformers import AutoTokenizer

from sonfolio.bench import Case, Track, bench_track, bf16_support, finish
from sonfolio.config import Bench, Export, ScoreBench, load_params
from sonfolio.evaluation import token_error_rate
from sonfolio.export import ONNX_FILES, variant_names
from sonfolio.io import read_jsonl
from sonfolio.logs import setup_logging
from sonfolio.score.batches import load_image, to_pixel_values

log = logging.getLogger(__name__)

STAGE = "score_bench"


def torch_cases(model: Path) -> tuple[list[Case], dict[str, str]]:
    """torch FP32, and bf16 where the device computes it natively (else why not)."""
    cases = [Case("torch_fp32", "torch", str(model))]
    ok, reason = bf16_support()
    log.info("torch bf16: %s", reason)
    if ok:
        return [*cases, Case("torch_bf16", "torch", str(model), "bf16")], {}
    return cases, {"torch_bf16": f"not measured: {reason}"}


def onnx_cases(
    export_cfg: Export, export_dir: Path, lean_loop: bool
) -> tuple[list[Case], dict[str, str]]:
    """ORT variants through optimum's ORTModel (`ort_*`), and through the plain greedy loop
    (`ortloop_*`) when `lean_loop`; absent folders named with the reason."""
    cases, absent = [], {}
    for name in variant_names(export_cfg):
        folder = export_dir / name
        runtimes = ["ort", "ortloop"] if lean_loop else ["ort"]
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
            return sum((folder / f).stat().st_size for f in ONNX_FILES)
        if case.runtime == "ct2":
            return (folder / "model.bin").stat().st_size
        per_param = 2 if case.dtype == "bf16" else 1  # bf16 halves the FP32 file in memory
        return sum(f.stat().st_size for f in folder.glob("*.safetensors")) // per_param

    return {c.name: size(c) for c in cases}


def run(
    cfg: Bench,
    gate: ScoreBench,
    export_cfg: Export,
    decode_max_tokens: int,
    data: Path,
    model: Path,
    export_dir: Path,
    metrics_path: Path,
) -> dict[str, Any]:
    """Measure every variant; write and return the metrics.

    Raises:
        QualityGateFailed (sonfolio.bench): past max_ter_increase, with fail_on_gate set.
    """
    tok = AutoTokenizer.from_pretrained(str(model))
    rows = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "test"][: cfg.samples]
    if not rows:
        raise ValueError(f"{data}/manifest.jsonl has no test rows: rerun score_data")
    shape = json.loads((model / "config.json").read_text())["encoder"]["image_size"]
    images = np.stack([load_image(data / r["image"], *shape) for r in rows])
    cases, absent = torch_cases(model)
    more, gone = onnx_cases(export_cfg, export_dir, cfg.lean_loop)
    refs = [r["text"] for r in rows]

    def score(outputs: list[list[int]]) -> dict[str, Any]:
        hyps = tok.batch_decode(outputs, skip_special_tokens=True)
        return {"ter": round(token_error_rate(refs, hyps), 4)}

    track = Track(
        name="score",
        stage=STAGE,
        cases=cases + more,
        sizes=sizes_of(cases + more),
        absent={**absent, **gone},
        inputs=to_pixel_values(images).numpy(),
        quality_tokens=decode_max_tokens,
        prompt=[tok.bos_token_id],
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
        gate_metric="ter",
        max_increase=gate.max_ter_increase,
    )
    with tempfile.TemporaryDirectory(prefix="score_bench-") as tmp:
        metrics, failures = bench_track(track, cfg, score, Path(tmp))
    return finish(metrics, failures, cfg, metrics_path, STAGE)


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.bench,
        params.score_bench,
        params.export,
        params.score_train.decode_max_tokens,
        paths.track("score").data,
        paths.track("score").model,
        paths.track("score").export,
        paths.metrics / f"{STAGE}.json",
    )


if __name__ == "__main__":
    main()
