"""The speech track's side of the eval stage (tasks/eval.py): one variant's transcripts on one
split scored (WER and CER through `evaluate`, with the local metric modules in
sonfolio/speech/metrics, per split and per voice) and shown (the worst transcriptions with
their audio paths).

Both sides are normalised first (sonfolio.speech.common.normalize, docs/speech.md); definitions and
the empty-text rules: docs/evaluation.md.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jiwer
import numpy as np

from sonfolio.evaluation import Decoded
from sonfolio.intervals import grouped, rate_interval
from sonfolio.io import write_json, write_jsonl
from sonfolio.speech.common.audio import SAMPLE_RATE, decode
from sonfolio.speech.common.normalize import normalize
from sonfolio.speech.eval import metrics

if TYPE_CHECKING:
    from sonfolio.config.eval import SpeechEval


def inputs(variant: Any, rows: list[dict], data: Path) -> np.ndarray:
    """(B, mel bins, frames of the model's window) log-mel features of `rows`' clips: what the
    model was trained on, made by the variant's feature extractor.

    Raises:
        AudioError: a clip cannot be decoded (the eval set must be whole: rerun
            `dvc repro data@speech`).
    """
    audio = [decode(data / r["audio"]) for r in rows]
    feats = variant.processor(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")
    return feats["input_features"]


def error_rates(wer: Any, cer: Any, refs: list[str], hyps: list[str]) -> dict[str, float]:
    """Corpus WER and CER of normalised texts through the `evaluate` modules."""
    return {
        "wer": wer.compute(predictions=hyps, references=refs)["wer"],
        "cer": cer.compute(predictions=hyps, references=refs)["cer"],
    }


def word_counts(ref: str, hyp: str) -> tuple[int, int]:
    """One clip's (word errors, reference words), as jiwer counts them for the corpus WER."""
    out = jiwer.process_words(ref, hyp)
    words = out.hits + out.substitutions + out.deletions
    return out.substitutions + out.deletions + out.insertions, words


def utterance_wer(ref: str, hyp: str) -> float:
    """One clip's WER (jiwer, as the metric module): ranks the worst examples."""
    return clip_rate(*word_counts(ref, hyp))


def clip_rate(errors: int, words: int) -> float:
    """A clip's WER from its `word_counts` (no reference words: 1 if anything was said)."""
    return errors / words if words else float(errors > 0)


def wer_interval(rows: list[dict], counts: list[tuple[int, int]]) -> dict[str, Any]:
    """The WER's 95 % bootstrap interval (sonfolio.intervals) from each clip's `word_counts`,
    resampled by voice where the clips come from several (an unheard voice errs on all its
    clips alike), else by clip."""
    voices = [r.get("speaker") or "unknown" for r in rows]
    keys, over = (voices, "voices") if len(set(voices)) > 1 else (list(range(len(rows))), "clips")
    errors, words = grouped([e for e, _ in counts], [w for _, w in counts], keys)
    return {"wer_ci95": rate_interval(errors, words), "wer_ci95_over": f"{len(errors)} {over}"}


class Scorer:
    """Scores every variant's transcripts and writes their worst examples; the `evaluate`
    metric modules are loaded once per run."""

    def __init__(self, cfg: SpeechEval, data: Path) -> None:
        self.cfg, self.data = cfg, data
        self.wer, self.cer = metrics.load("wer"), metrics.load("cer")

    def rates(self, refs: list[str], hyps: list[str]) -> dict[str, float]:
        return error_rates(self.wer, self.cer, refs, hyps)

    def score(self, decoded: Decoded, folder: Path) -> dict[str, Any]:
        """Metrics of one variant's transcripts on one split (overall and per voice); writes
        predictions.jsonl and worst.json into `folder`."""
        rows, hyps, decode_s = decoded.rows, decoded.hyps, decoded.decode_s
        refs = [normalize(r["text"]) for r in rows]
        norm = [normalize(h) for h in hyps]
        result: dict[str, Any] = {**self.rates(refs, norm), "clips": len(rows)}
        counts = [word_counts(r, h) for r, h in zip(refs, norm, strict=True)]  # once a clip
        result.update(wer_interval(rows, counts))
        by_voice: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            by_voice[r.get("speaker") or "unknown"].append(i)
        result["per_voice"] = {
            voice: {
                **self.rates([refs[i] for i in idx], [norm[i] for i in idx]),
                "clips": len(idx),
            }
            for voice, idx in sorted(by_voice.items())
        }
        audio_s = sum(r.get("duration", 0.0) for r in rows)
        result.update(
            decode_s=round(decode_s, 2),
            clips_per_s=round(len(rows) / decode_s, 2),
            real_time_factor=round(decode_s / audio_s, 4) if audio_s else None,
        )
        per = [
            {
                "audio": str(self.data / r["audio"]),
                "speaker": r.get("speaker"),
                "ref": r["text"],
                "hyp": h,
                "ref_norm": rn,
                "hyp_norm": hn,
                "wer": round(clip_rate(e, w), 4),
            }
            for r, h, rn, hn, (e, w) in zip(rows, hyps, refs, norm, counts, strict=True)
        ]
        worst = sorted(per, key=lambda x: -x["wer"])[: self.cfg.worst_examples]
        folder.mkdir(parents=True, exist_ok=True)
        write_jsonl(folder / "predictions.jsonl", per)
        write_json(folder / "worst.json", worst)
        result["worst"] = [{k: w[k] for k in ("audio", "ref", "hyp", "wer")} for w in worst]
        return result


PROCESSOR_FILES = (
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "normalizer.json",
)


def zero_shot_base(base: str, model: Path, out: Path) -> Path:
    """The untouched base Whisper `base` (sonfolio.speech.model.bases names) saved in `out` as a
    variant folder with the fine-tuned `model`'s window, prompt and processor: its weights as
    fine-tuning found them (only the positional table is cut to the window, as training cut
    it), so its scores are the step-0 baseline of the same decoding.

    Raises:
        ValueError: the base cannot be loaded or does not match the fine-tuned model.
    """
    import shutil

    from transformers import GenerationConfig, WhisperForConditionalGeneration

    from sonfolio.speech.model.bases import BaseModelError, resolve
    from sonfolio.speech.model.model import cut_window

    tuned = WhisperForConditionalGeneration.config_class.from_pretrained(str(model))
    try:
        source = resolve(base)
    except BaseModelError as err:
        raise ValueError(f"speech_eval.zero_shot_base = {base!r}: {err}") from err
    net = WhisperForConditionalGeneration.from_pretrained(source)
    if net.config.d_model != tuned.d_model or net.config.vocab_size != tuned.vocab_size:
        raise ValueError(
            f"speech_eval.zero_shot_base = {base!r} is not the base of {model} (another size "
            "or vocabulary): set it to speech_train.model.base_model, or null"
        )
    if tuned.max_source_positions < net.config.max_source_positions:
        cut_window(net, tuned.max_source_positions)
    net.generation_config = GenerationConfig.from_pretrained(str(model))
    net.save_pretrained(str(out))
    for name in PROCESSOR_FILES:
        if (model / name).is_file():
            shutil.copyfile(model / name, out / name)
    return out
