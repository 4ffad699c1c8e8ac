"""Benching one track: every case over interleaved rounds, pooled, compared and gated.

`repeats` rounds run every case once each (sonfolio.bench.worker, a fresh process apiece), in
an order rotated per round (interleaved, so a load spike on the shared machine hits all
variants alike), and the figures are medians / percentiles over all rounds.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sonfolio import cpu, int8_weights
from sonfolio.bench.case import Case, Spec
from sonfolio.bench.worker import run_case
from sonfolio.ctc_format import folder_decoding
from sonfolio.io import write_json

log = logging.getLogger(__name__)


def percentile(values: list[float], q: float) -> float:
    """The `q`-th percentile (0-100) of `values`."""
    return float(np.percentile(np.asarray(values), q))


def summarize(
    runs: list[dict[str, Any]], decode_tokens: int, batch_size: int, seconds: list[float] | None
) -> dict[str, Any]:
    """Pool the rounds of one variant: p50/p95 latency, throughput, median RSS; with the clips'
    feature-extraction times (`features_ms`), end-to-end with them, and with the clips'
    durations (`seconds`, s), the real-time factor (end-to-end with features / duration)."""
    enc = [v for r in runs for v in r["encoder_ms"]]
    e2e = [v for r in runs for v in r["e2e_ms"]]
    audio_in = runs[0].get("input") == "audio"  # its e2e includes its feature extraction
    feats = [v for r in runs for v in r["features_ms"]] if "features_ms" in runs[0] else None
    inside = feats if audio_in and feats else [0.0] * len(e2e)
    per_token = [(t - e - f) / decode_tokens for t, e, f in zip(e2e, enc, inside, strict=True)]
    n = len(runs[0]["e2e_ms"])
    out = {
        "input": runs[0].get("input", "features"),
        "encoder_ms_p50": round(percentile(enc, 50), 2),
        "encoder_ms_p95": round(percentile(enc, 95), 2),
        "decoder_ms_per_token_p50": round(percentile(per_token, 50), 3),
        "decoder_ms_per_token_p95": round(percentile(per_token, 95), 3),
        "e2e_ms_p50": round(percentile(e2e, 50), 2),
        "e2e_ms_p95": round(percentile(e2e, 95), 2),
        "throughput_batch1_per_s": round(1e3 / percentile(e2e, 50), 2),
        f"throughput_batch{batch_size}_per_s": round(
            n / statistics.median(r["batch_seconds"] for r in runs), 2
        ),
        "rss_peak_mb": round(statistics.median(r["rss_peak_mb"] for r in runs), 1),
        # the peak before the batch phase: opening, warm-up and batch-1 decodes only
        "rss_peak_batch1_mb": round(statistics.median(r["rss_batch1_mb"] for r in runs), 1),
        "rss_over_imports_mb": round(
            statistics.median(r["rss_peak_mb"] - r["rss_imports_mb"] for r in runs), 1
        ),
        "new_tokens_median": statistics.median(t for r in runs for t in r["tokens_out"]),
    }
    if feats is None:
        return out
    with_features = e2e if audio_in else [t + f for t, f in zip(e2e, feats, strict=True)]
    out |= {
        "features_ms_p50": round(percentile(feats, 50), 2),
        "features_in_e2e": audio_in,
        "e2e_with_features_ms_p50": round(percentile(with_features, 50), 2),
        "e2e_with_features_ms_p95": round(percentile(with_features, 95), 2),
    }
    if seconds:
        rtf = [t / 1e3 / s for t, s in zip(with_features, seconds * len(runs), strict=True)]
        out |= {
            "real_time_factor_p50": round(percentile(rtf, 50), 4),
            "real_time_factor_p95": round(percentile(rtf, 95), 4),
        }
    return out


class QualityGateFailed(RuntimeError):
    """A variant lost more quality than the stage's gate allows (and fail_on_gate is set)."""


@dataclass(frozen=True)
class Track:
    """What a bench stage hands to `bench_track`."""

    name: str  # the track's name
    stage: str  # the stage's name, e.g. bench@score
    cases: list[Case]
    sizes: dict[str, int]  # bytes on disk per case name
    absent: dict[str, str]  # variant name -> why it was not measured
    inputs: np.ndarray  # (N, ...) float32
    quality_tokens: int
    prompt: list[int]  # CT2's decoder prompt; these ids are also dropped from outputs
    eos_id: int
    pad_id: int  # stripped from the end of outputs
    gate_metric: str  # the quality key the gate reads (lower is better)
    max_increase: float
    # the clips' raw audio (float32, `sample_rate`), for a runtime that takes audio
    # (faster-whisper) and to time the other rows' feature extraction; None: no such runtime
    audio: list[np.ndarray] | None = None
    sample_rate: int = 16_000
    features_from: Path | None = None  # the folder whose feature extractor made `inputs`
    model_suppress: bool = False  # CT2: suppress as the model's config says (a real Whisper)


def conditions(cfg: Any, workdir: Path) -> dict[str, Any]:
    """What the figures depend on, recorded beside them."""

    import ctranslate2
    import onnxruntime
    import torch

    return {
        "threads": cfg.threads,
        "loop_decoder_threads": cfg.loop_decoder_threads,
        "spin_wait": cfg.spin_wait,
        "samples": cfg.samples,
        "warmup": cfg.warmup,
        "repeats": cfg.repeats,
        "batch_size": cfg.batch_size,
        "decode_tokens": cfg.decode_tokens,
        "io_binding": cfg.io_binding,
        # int8 speed and quality depend on VNNI / AMX / DOTPROD; load_average_after is filled in
        # when the runs are done
        **cpu.run_conditions(cpu.load_average()),
        "versions": {
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "ctranslate2": ctranslate2.__version__,
        },
        "process": "a fresh process per variant per round; rounds interleaved",
    }


def bench_track(
    track: Track, cfg: Any, score: Any, workdir: Path
) -> tuple[dict[str, Any], list[str]]:
    """Measure every case; score its greedy outputs with `score(outputs) -> {metric: value}`
    (token id lists in, lower is better), and mark each against torch FP32 and the gate.

    Returns (metrics, failures); failures name the variants past the gate and the numbers.
    """
    from rich.progress import Progress

    np.save(workdir / "inputs.npy", track.inputs)
    audio, seconds = "", None
    if track.audio is not None:
        audio = str(workdir / "audio.npz")
        np.savez(audio, **{str(i): a for i, a in enumerate(track.audio)})
        seconds = [len(a) / track.sample_rate for a in track.audio]
    runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in track.cases}
    metrics: dict[str, Any] = {"conditions": conditions(cfg, workdir)}
    with Progress(transient=True) as bar:
        job = bar.add_task(f"{track.stage}", total=cfg.repeats * len(track.cases))
        for r in range(cfg.repeats):
            k = r % len(track.cases)
            for case in track.cases[k:] + track.cases[:k]:
                spec = Spec(
                    case=case,
                    track=track.name,
                    inputs=str(workdir / "inputs.npy"),
                    threads=cfg.threads,
                    decoder_threads=cfg.loop_decoder_threads,
                    spin_wait=cfg.spin_wait,
                    warmup=cfg.warmup,
                    batch_size=cfg.batch_size,
                    decode_tokens=cfg.decode_tokens,
                    quality_tokens=track.quality_tokens,
                    io_binding=cfg.io_binding,
                    prompt=track.prompt,
                    eos_id=track.eos_id,
                    quality=r == 0,
                    audio=audio,
                    features_from=str(track.features_from or ""),
                    model_suppress=track.model_suppress,
                )
                runs[case.name].append(run_case(spec, workdir))
                bar.advance(job)
    metrics["conditions"]["load_average_after"] = cpu.load_average()
    variants = {}
    for case in track.cases:
        figures = summarize(runs[case.name], cfg.decode_tokens, cfg.batch_size, seconds)
        outputs = [_clean(ids, track) for ids in runs[case.name][0]["outputs"]]
        variants[case.name] = {
            "runtime": case.runtime,
            "decoding": "ctc" if folder_decoding(Path(case.folder))[0] else "attention",
            "bytes": track.sizes[case.name],
            **_int8_weights(case),
            **figures,
            **runs[case.name][0].get("notes", {}),
            **score(outputs),
            "_outputs": outputs,
        }
    failures = _compare(variants, track)
    for v in variants.values():
        v.pop("_outputs")
    variants.update({name: {"status": why} for name, why in track.absent.items()})
    metrics["variants"] = variants
    return metrics, failures


REFERENCE = "torch_fp32"


def _int8_weights(case: Case) -> dict[str, Any]:
    """{"int8_weights": ...} for an ORT case of an int8 folder (sonfolio.cpu), else {}."""
    if case.runtime in ("torch", "faster_whisper") or not Path(case.folder).is_dir():
        return {}
    found = int8_weights.int8_weight_range(Path(case.folder))
    return {"int8_weights": found} if found else {}


def _clean(ids: list[int], track: Track) -> list[int]:
    """Token ids up to end of text, without the prompt or padding: runtimes differ in what
    they echo (HF Whisper drops the end token and pads a batch with the pad id)."""
    if track.eos_id in ids:
        ids = ids[: ids.index(track.eos_id)]
    while ids and ids[-1] == track.pad_id:
        ids = ids[:-1]
    while ids and ids[0] in track.prompt:
        ids = ids[1:]
    return ids


def _compare(variants: dict[str, dict[str, Any]], track: Track) -> list[str]:
    """Ratios to torch FP32, agreement of outputs with it, and the quality gate."""
    ref = variants[REFERENCE]
    peer = variants.get("ct2_int8")
    failures = []
    for name, v in variants.items():
        v["size_ratio"] = round(v["bytes"] / ref["bytes"], 4)
        v["speedup_vs_torch_fp32"] = round(ref["e2e_ms_p50"] / v["e2e_ms_p50"], 3)
        if peer is not None:
            v["latency_vs_ctranslate2"] = round(v["e2e_ms_p50"] / peer["e2e_ms_p50"], 3)
        same = [a == b for a, b in zip(v["_outputs"], ref["_outputs"], strict=True)]
        v["agreement_with_torch_fp32"] = round(sum(same) / len(same), 4)
        loss = v[track.gate_metric] - ref[track.gate_metric]
        v[f"{track.gate_metric}_increase"] = round(loss, 4)
        v["status"] = "passed"
        if name != REFERENCE and loss > track.max_increase:
            v["status"] = "failed"
            failures.append(
                f"{name}: {track.gate_metric} {v[track.gate_metric]:.4f} vs torch FP32 "
                f"{ref[track.gate_metric]:.4f} (+{loss:.4f} > the allowed +{track.max_increase})"
            )
    return failures


def finish(
    metrics: dict[str, Any], failures: list[str], cfg: Any, metrics_path: Path, stage: str
) -> dict[str, Any]:
    """Write the metrics; fail the stage if a gate failed and fail_on_gate is set."""
    metrics["gate_failures"] = failures
    if failures and cfg.fail_on_gate:
        raise QualityGateFailed(
            f"{stage}: quality gate failed (bench.fail_on_gate is true):\n  "
            + "\n  ".join(failures)
        )
    for f in failures:
        log.warning("%s: past the quality gate (marked failed): %s", stage, f)
    write_json(metrics_path, metrics)
    return metrics
