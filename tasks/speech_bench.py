"""Stage speech_bench: every speech variant and the CTranslate2 peer on the same test clips.

Run:    dvc repro speech_bench      (or: python -m tasks.speech_bench)
Reads:  params.yaml (bench, speech_bench, export.quantize, speech_train.decode_max_tokens,
        paths), ${paths.track("speech").data}/ (test split), ${paths.track("speech").model}/ (torch FP32),
        ${paths.track("speech").export}/<variant>/ (ONNX variants)
Writes: ${paths.metrics}/speech_bench.json: per variant size, peak RSS, latency (encoder ms,
        decoder ms per token, end to end; p50, p95), throughput at batch 1 and batch N, WER and
        CER (normalised text), the WER increase over torch FP32 and the gate status,
        latency_vs_ctranslate2, and the conditions

The peer: the FP32 model converted with CTranslate2 (int8), decoded greedily to the same length
(sonfolio.bench.convert_ct2 says how its prompt differs).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from transformers import AutoFeatureExtractor, AutoTokenizer

from sonfolio.bench import Case, Track, bench_track, convert_ct2, finish
from sonfolio.config import Bench, Export, SpeechBench, load_params
from sonfolio.evaluation import char_error_rate, word_error_rate
from sonfolio.io import read_jsonl
from sonfolio.logs import setup_logging
from sonfolio.speech.audio import SAMPLE_RATE, decode
from sonfolio.speech.normalize import normalize
from tasks.score_bench import onnx_cases, sizes_of, torch_cases

log = logging.getLogger(__name__)

STAGE = "speech_bench"


def run(
    cfg: Bench,
    gate: SpeechBench,
    export_cfg: Export,
    decode_max_tokens: int,
    data: Path,
    model: Path,
    export_dir: Path,
    metrics_path: Path,
) -> dict[str, Any]:
    """Measure every variant (and the CTranslate2 peer); write and return the metrics.

    Raises:
        QualityGateFailed (sonfolio.bench): past max_wer_increase, with fail_on_gate set.
    """
    tok = AutoTokenizer.from_pretrained(str(model))
    features = AutoFeatureExtractor.from_pretrained(str(model))
    rows = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "test"][: cfg.samples]
    if not rows:
        raise ValueError(f"{data}/manifest.jsonl has no test rows: rerun speech_data")
    audio = [decode(data / r["audio"]) for r in rows]
    inputs = features(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
    refs = [r["text_norm"] for r in rows]
    cases, absent = torch_cases(model)
    more, gone = onnx_cases(export_cfg, export_dir, cfg.lean_loop)
    cases, absent = cases + more, {**absent, **gone}

    def score(outputs: list[list[int]]) -> dict[str, Any]:
        hyps = [normalize(h) for h in tok.batch_decode(outputs, skip_special_tokens=True)]
        return {
            "wer": round(word_error_rate(refs, hyps), 4),
            "cer": round(char_error_rate(refs, hyps), 4),
        }

    with tempfile.TemporaryDirectory(prefix="speech_bench-") as tmp:
        prompt = [tok.bos_token_id]
        if gate.ctranslate2:
            prompt = convert_ct2(model, Path(tmp) / "ct2")
            cases.append(Case("ct2_int8", "ct2", str(Path(tmp) / "ct2")))
        else:
            absent["ct2_int8"] = "not measured: speech_bench.ctranslate2 is false"
        # (N, mel bins, frames) float32: the fixed window every runtime takes
        track = Track(
            name="speech",
            stage=STAGE,
            cases=cases,
            sizes=sizes_of(cases),
            absent=absent,
            inputs=np.asarray(inputs, dtype=np.float32),
            quality_tokens=min(decode_max_tokens, _max_new(model)),
            prompt=prompt,
            eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id,
            gate_metric="wer",
            max_increase=gate.max_wer_increase,
        )
        metrics, failures = bench_track(track, cfg, score, Path(tmp))
    return finish(metrics, failures, cfg, metrics_path, STAGE)


def _max_new(model: Path) -> int:
    """New tokens the decoder has positions for (the start token takes one, CT2's prompt two)."""
    import json

    return int(json.loads((model / "config.json").read_text())["max_target_positions"]) // 2 - 2


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.bench,
        params.speech_bench,
        params.export,
        params.speech_train.decode_max_tokens,
        paths.track("speech").data,
        paths.track("speech").model,
        paths.track("speech").export,
        paths.metrics / f"{STAGE}.json",
    )


if __name__ == "__main__":
    main()
