"""The real voice (data@speech's real/ set) read by every variant and by the untouched base, and
the gate that keeps a fine-tuned model reading it worse than its base from passing unnoticed.

Each clip is read as `sonfolio transcribe` reads audio (sonfolio.speech.decode: cut into chunks
that fit the model's window, decoded, joined), with the eval's decoding limit and batch size and
no voice detection (every chunk is decoded, as in the splits), then scored as a split is
(sonfolio.speech.eval.evaluate.Scorer). The clips last up to 30 s, past the 8-s window a
fine-tuned model reads: one more reason they are no split of the dataset's manifest.

The gate (speech_eval.real): a variant whose WER on the real voice exceeds the base's by more
than `max_wer_increase` is marked `failed` with both figures, or, with `fail_on_gate`, fails
the stage. The set is never trained or tuned on: training reads manifest.jsonl alone.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio import variant_eval, variants
from sonfolio.evaluation import Decoded
from sonfolio.intervals import difference_interval
from sonfolio.io import read_jsonl
from sonfolio.parallel import batched, progress
from sonfolio.speech.common.audio import SAMPLE_RATE, decode
from sonfolio.speech.decode.chunks import join_texts, plan_chunks, processor_window_s
from sonfolio.speech.decode.transcribe import read_pieces
from sonfolio.speech.eval.evaluate import Scorer, word_counts, zero_shot_base

if TYPE_CHECKING:
    from sonfolio.config.eval import SpeechEval
    from sonfolio.config.infer import Infer
    from sonfolio.config.paths import TrackPaths

log = logging.getLogger(__name__)

FOLDER = "real"  # <data>/real/, as sonfolio.speech.data.real writes it
SPLIT = "real"
GATE_METRIC = "wer"  # what speech_eval.real.max_wer_increase bounds


class RealVoiceGateFailed(RuntimeError):
    """A fine-tuned variant reads the real voice worse than its base, and fail_on_gate is set."""


def absent_reason(data: Path, data_stats: Path) -> str:
    """Why `data` holds no real set: the data stage's own words, else what to run."""
    stats = json.loads(data_stats.read_text()) if data_stats.is_file() else {}
    why = stats.get("real", {}).get("absent")
    return why or f"no {data / FOLDER / 'manifest.jsonl'}: rerun `dvc repro -f data@speech`"


def eval_infer(cfg: SpeechEval, infer: Infer) -> Infer:
    """`infer` as the eval reads with it: speech_eval's batch size, decode workers and decoding
    limit, and every
    chunk decoded (voice detection may drop speech; the splits have none either)."""
    quiet = infer.speech.no_speech.model_copy(update={"check": False})
    speech = infer.speech.model_copy(
        update={
            "decode_workers": cfg.decode_workers,
            "max_tokens": cfg.decode_max_tokens,
            "no_speech": quiet,
        }
    )
    return infer.model_copy(update={"batch_size": cfg.batch_size, "speech": speech})


def read_clips(v: variants.Variant, rows: list[dict], data: Path, infer: Infer) -> list[str]:
    """Each clip's whole text as `sonfolio transcribe` reads a file (the same cuts where a clip
    outlasts the window, the same joins), the chunks of `infer.batch_size` x
    `infer.speech.decode_workers` clips read together (read_pieces: batches decoded side by side):
    one clip a call left the decoder's loop to run a batch of one."""
    window = processor_window_s(v.processor)
    texts: list[str] = []
    with progress() as bar:
        task = bar.add_task(f"{v.name}: reading the real voice", total=len(rows))
        for group in batched(rows, infer.batch_size * infer.speech.decode_workers):
            clips = [decode(data / r["audio"]) for r in group]
            plans = [plan_chunks(x, SAMPLE_RATE, window, infer.speech.audio) for x in clips]
            pieces = [
                x[c.start : c.end] for x, plan in zip(clips, plans, strict=True) for c in plan
            ]
            heard = iter(read_pieces(v, pieces, infer))
            for plan in plans:
                texts.append(join_texts([next(heard) for _ in plan], [c.overlaps for c in plan]))
            bar.advance(task, len(group))
    return texts


def clip_counts(predictions: Path) -> list[tuple[int, int]]:
    """(word errors, reference words) of each clip of a predictions.jsonl the Scorer wrote."""
    return [word_counts(r["ref_norm"], r["hyp_norm"]) for r in read_jsonl(predictions)]


def check_gate(
    per_variant: dict[str, dict],
    base: str | None,
    cfg: SpeechEval,
    counts: dict[str, list[tuple[int, int]]] | None = None,
) -> list[str]:
    """Mark each fine-tuned variant against the base on the real voice (`<metric>_vs_base`,
    `gate`: passed | failed | unchecked); the failures, each with both figures. With each
    one's per-clip `counts` (the same clips in the same order), the difference also gets its
    paired 95 % bootstrap interval over the clips (`wer_vs_base_ci95`): how sure it is."""
    allowed = cfg.real.max_wer_increase
    if base is None:
        for name in per_variant:
            per_variant[name]["gate"] = "unchecked"
        return []
    ref = per_variant[base][GATE_METRIC]
    failures = []
    for name, m in per_variant.items():
        if name == base:
            continue
        loss = round(m[GATE_METRIC] - ref, 4)
        m[f"{GATE_METRIC}_vs_base"] = loss
        sure = ""
        if counts and name in counts and base in counts:
            mine, theirs = counts[name], counts[base]
            diff = difference_interval(
                [e for e, _ in theirs], [e for e, _ in mine], [w for _, w in theirs]
            )
            m[f"{GATE_METRIC}_vs_base_ci95"] = diff["difference_ci95"]
            if diff["difference_ci95"]:
                low, high = diff["difference_ci95"]
                sure = f"; 95 % interval over the clips {low:+.4f} to {high:+.4f}"
        m["gate"] = "failed" if loss > allowed else "passed"
        if loss > allowed:
            failures.append(
                f"{name}: real-voice {GATE_METRIC.upper()} {m[GATE_METRIC]:.4f} vs the untouched "
                f"base's {ref:.4f} (+{loss:.4f} > the allowed +{allowed}{sure})"
            )
    return failures


def evaluate_real(
    cfg: SpeechEval,
    infer: Infer,
    data: Path,
    folders: list[Path],
    base: Path | None,
    samples: Path,
    work: Path,
) -> dict[str, Any]:
    """Every folder (variants, then the base) read on the real set and gated; each one's
    predictions.jsonl and worst.json written to samples/<name>/real/.

    Raises:
        RealVoiceGateFailed: a variant past the gate, with speech_eval.real.fail_on_gate set.
        VariantError: a folder cannot be loaded.
    """
    every = variant_eval.eval_rows(
        read_jsonl(data / FOLDER / "manifest.jsonl"), SPLIT, cfg.real.max_samples, cfg.seed
    )
    scorer, reading = Scorer(cfg, data), eval_infer(cfg, infer)

    def one(v: variants.Variant, split: str, rows: list[dict]) -> dict[str, Any]:
        t0 = time.perf_counter()
        hyps = read_clips(v, rows, data, reading)
        decoded = Decoded(v.name, split, rows, hyps, time.perf_counter() - t0)
        m = scorer.score(decoded, work / v.name)
        m.pop("per_voice")  # one speaker: the same figures again
        log.info("%s real voice: wer %.3f, cer %.3f", v.name, m["wer"], m["cer"])
        return m

    found = variant_eval.evaluate_all(
        folders + ([base] if base else []), "speech", cfg.threads, {SPLIT: every}, one
    )
    per_variant = {name: {"kind": e["kind"], **e["splits"][SPLIT]} for name, e in found.items()}
    for name in per_variant:  # staged under work: only a finished read lands beside the splits
        target = samples / name / SPLIT
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(work / name, target)
    counts = {name: clip_counts(samples / name / SPLIT / "predictions.jsonl") for name in found}
    failures = check_gate(per_variant, base.name if base else None, cfg, counts)
    result = {
        "clips": len(every),
        "audio_s": round(sum(r["duration"] for r in every), 1),
        "base": base.name if base else None,
        "max_wer_increase": cfg.real.max_wer_increase,
        "variants": per_variant,
        "gate_failures": failures,
    }
    if failures and cfg.real.fail_on_gate:
        raise RealVoiceGateFailed(
            "eval@speech: real-voice gate failed (speech_eval.real.fail_on_gate is true):\n  "
            + "\n  ".join(failures)
        )
    for f in failures:
        log.warning("eval@speech: past the real-voice gate (marked failed): %s", f)
    return result


def real_voice(
    cfg: SpeechEval, infer: Infer, paths: TrackPaths, data_stats: Path, work: Path
) -> dict[str, Any]:
    """{"real": figures}: every variant of `paths` and the untouched base
    (speech_eval.zero_shot_base) on the real set, or {"real": {"absent": why}}."""
    if not (paths.data / FOLDER / "manifest.jsonl").is_file():
        why = absent_reason(paths.data, data_stats)
        log.warning("eval@speech: no real voice to read (%s)", why)
        return {"real": {"absent": why}}
    base = None
    if cfg.zero_shot_base:
        base = zero_shot_base(cfg.zero_shot_base, paths.model, work / "base_zero_shot")
    folders = variants.discover(paths.model, paths.export)
    samples = paths.eval / "samples"
    return {"real": evaluate_real(cfg, infer, paths.data, folders, base, samples, work / "read")}
