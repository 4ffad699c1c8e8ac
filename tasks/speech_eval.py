"""Stage speech_eval: every speech model variant on the same clips: WER and CER (through
`evaluate`, with the local metric modules in sonfolio/speech/metrics), per split and per voice,
and the worst transcriptions with their audio paths.

Run:    dvc repro speech_eval      (or: python -m tasks.speech_eval)
Reads:  params.yaml (speech_eval, paths), ${paths.track("speech").data}/ (manifest, audio),
        ${paths.track("speech").model}/ (the FP32 model: the reference) and every variant folder under
        ${paths.track("speech").export}/ that exists (sonfolio.variants.discover)
Writes: ${paths.track("speech").eval}/samples/<variant>/<split>/predictions.jsonl and worst.json,
        ${paths.track("speech").eval}/quality.csv (dvc plots), ${paths.metrics}/speech_eval.json (per
        variant, split and voice, with each variant's difference from the reference)

Both sides are normalised first (sonfolio.speech.normalize, docs/speech.md); definitions and
the empty-text rules: docs/evaluation.md.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import jiwer
from rich.progress import Progress

from sonfolio import variants
from sonfolio.config import SpeechEval, load_params
from sonfolio.io import read_jsonl, staged_dir, write_json, write_jsonl
from sonfolio.logs import setup_logging
from sonfolio.speech import metrics
from sonfolio.speech.audio import SAMPLE_RATE, decode
from sonfolio.speech.normalize import normalize

log = logging.getLogger(__name__)

STAGE = "speech_eval"
DELTA_KEYS = ("wer", "cer")


def transcribe(v: variants.Variant, rows: list[dict], data: Path, cfg: SpeechEval) -> list[str]:
    """Greedy transcripts for `rows`, `cfg.batch_size` clips per generate call.

    Raises:
        AudioError: a clip cannot be decoded (the eval set must be whole: rerun speech_data).
    """
    hyps: list[str] = []
    with Progress(transient=True) as bar:
        task = bar.add_task(f"{v.name}: transcribing", total=len(rows))
        for start in range(0, len(rows), cfg.batch_size):
            chunk = rows[start : start + cfg.batch_size]
            audio = [decode(data / r["audio"]) for r in chunk]
            # (B, mel bins, frames of the model's window): what the model was trained on
            feats = v.processor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt")
            hyps += v.generate(feats["input_features"], cfg.decode_max_tokens)
            bar.advance(task, len(chunk))
    return hyps


def error_rates(wer: Any, cer: Any, refs: list[str], hyps: list[str]) -> dict[str, float]:
    """Corpus WER and CER of normalised texts through the `evaluate` modules."""
    return {
        "wer": wer.compute(predictions=hyps, references=refs)["wer"],
        "cer": cer.compute(predictions=hyps, references=refs)["cer"],
    }


def utterance_wer(ref: str, hyp: str) -> float:
    """One clip's WER (jiwer, as the metric module): ranks the worst examples."""
    out = jiwer.process_words(ref, hyp)
    words = out.hits + out.substitutions + out.deletions
    errors = out.substitutions + out.deletions + out.insertions
    return errors / words if words else float(errors > 0)


def evaluate_split(
    v: variants.Variant,
    rows: list[dict],
    data: Path,
    cfg: SpeechEval,
    wer: Any,
    cer: Any,
    folder: Path,
) -> dict[str, Any]:
    """Metrics of one variant on one split; writes its predictions and worst examples."""
    t0 = time.perf_counter()
    hyps = transcribe(v, rows, data, cfg)
    seconds = time.perf_counter() - t0
    refs = [normalize(r["text"]) for r in rows]
    norm = [normalize(h) for h in hyps]
    result: dict[str, Any] = {**error_rates(wer, cer, refs, norm), "clips": len(rows)}
    by_voice: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_voice[r.get("speaker") or "unknown"].append(i)
    result["per_voice"] = {
        voice: {
            **error_rates(wer, cer, [refs[i] for i in idx], [norm[i] for i in idx]),
            "clips": len(idx),
        }
        for voice, idx in sorted(by_voice.items())
    }
    audio_s = sum(r.get("duration", 0.0) for r in rows)
    result.update(
        decode_s=round(seconds, 2),
        clips_per_s=round(len(rows) / seconds, 2),
        real_time_factor=round(seconds / audio_s, 4) if audio_s else None,
    )
    per = [
        {
            "audio": str(data / r["audio"]),
            "speaker": r.get("speaker"),
            "ref": r["text"],
            "hyp": h,
            "ref_norm": rn,
            "hyp_norm": hn,
            "wer": round(utterance_wer(rn, hn), 4),
        }
        for r, h, rn, hn in zip(rows, hyps, refs, norm, strict=True)
    ]
    worst = sorted(per, key=lambda x: -x["wer"])[: cfg.worst_examples]
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "predictions.jsonl", per)
    write_json(folder / "worst.json", worst)
    result["worst"] = [{k: w[k] for k in ("audio", "ref", "hyp", "wer")} for w in worst]
    return result


def _round(m: Any) -> Any:
    if isinstance(m, dict):
        return {k: _round(v) for k, v in m.items()}
    if isinstance(m, list):
        return [_round(v) for v in m]
    return round(m, 4) if isinstance(m, float) else m


def run(
    cfg: SpeechEval, data: Path, variant_dirs: list[Path], out: Path, metrics_path: Path
) -> dict[str, Any]:
    """Evaluate each variant folder (the first is the reference) on cfg.splits.

    Raises:
        VariantError: a variant folder cannot be loaded or is not a speech model.
        ValueError: a split has no clips.
    """
    rows = read_jsonl(data / "manifest.jsonl")
    splits = {s: variants.eval_rows(rows, s, cfg.max_samples, cfg.seed) for s in cfg.splits}
    for split, chosen in splits.items():
        if not chosen:
            raise ValueError(
                f"{data}/manifest.jsonl has no {split!r} rows: check speech_eval.splits"
            )
    wer, cer = metrics.load("wer"), metrics.load("cer")
    start = time.perf_counter()
    with staged_dir(out / "samples") as tmp:

        def one(v: variants.Variant, split: str, chosen: list[dict]) -> dict[str, Any]:
            m = evaluate_split(v, chosen, data, cfg, wer, cer, tmp / v.name / split)
            log.info("%s %s: WER %.3f, CER %.3f", v.name, split, m["wer"], m["cer"])
            return _round(m)

        per_variant = variants.evaluate_all(variant_dirs, "speech", cfg.threads, splits, one)
    result = variants.quality_results(
        per_variant, variant_dirs[0].name, DELTA_KEYS, "clips_per_s", out / "quality.csv", start
    )
    write_json(metrics_path, result)
    return result


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.speech_eval,
        paths.track("speech").data,
        variants.discover(paths.track("speech").model, paths.track("speech").export),
        paths.track("speech").eval,
        paths.metrics / f"{STAGE}.json",
    )


if __name__ == "__main__":
    main()
