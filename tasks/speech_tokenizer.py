"""Stage speech_tokenizer: the tokenizer and feature extractor of the speech model.

Run:    dvc repro speech_tokenizer      (or: python -m tasks.speech_tokenizer)
Reads:  params.yaml (speech_tokenizer, paths.track("speech").tokenizer, paths.metrics),
        ${paths.track("speech").data}/manifest.jsonl; the base model when speech_tokenizer.base_model
        is set (a hub id, or a local folder).
Writes: ${paths.track("speech").tokenizer}/ (loads with transformers' AutoTokenizer and
        AutoFeatureExtractor), ${paths.metrics}/speech_tokenizer.json

With base_model: null (training from scratch) a BPE is trained on the train transcripts and the
stage fails if any transcript (any split, as written and normalised) does not decode back to
itself exactly. A base model's tokenizer is taken as it is: round-trip failures are counted and
logged, not fatal. Either way the stage fails if a clip is longer than the feature extractor's
window (it would be cut).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sonfolio.config import SpeechTokenizer, load_params
from sonfolio.io import read_jsonl, staged_dir, write_json
from sonfolio.logs import setup_logging
from sonfolio.speech.processor import build_feature_extractor, load_base
from sonfolio.tokenizer import length_stats, round_trip_failures, train_bpe

log = logging.getLogger(__name__)


class RoundTripError(RuntimeError):
    """The tokenizer does not give back some transcript exactly."""


class ClipTooLong(ValueError):
    """A clip is longer than the feature extractor's window."""


def check_window(rows: list[dict[str, Any]], chunk_length_s: float) -> None:
    longest = max(rows, key=lambda r: r["duration"])
    if longest["duration"] > chunk_length_s:
        raise ClipTooLong(
            f"{longest['audio']} lasts {longest['duration']} s, longer than the model's input "
            f"window of {chunk_length_s} s: lower speech_data.max_duration_s, or raise "
            "speech_tokenizer.chunk_length_s (from scratch only; a base model's is fixed)"
        )


def run(cfg: SpeechTokenizer, manifest: Path, out: Path, metrics: Path) -> dict[str, Any]:
    """Build (or take) the tokenizer and feature extractor, check them, save them to `out`.

    Raises:
        RoundTripError, ClipTooLong, BaseModelUnavailable; ValueError if no train split.
    """
    rows = read_jsonl(manifest)
    train = [r["text"] for r in rows if r["split"] == "train"]
    if not train:
        raise ValueError(f"{manifest} has no train split: rerun `dvc repro speech_data`")
    if cfg.base_model:
        processor = load_base(cfg.base_model)
        tok, features, parts = processor.tokenizer, processor.feature_extractor, [processor]
    else:
        tok = train_bpe(train, cfg.vocab_size, cfg.min_frequency, cfg.model_max_length)
        features = build_feature_extractor(cfg)
        parts = [tok, features]
    check_window(rows, features.chunk_length)
    texts = [r["text"] for r in rows] + [r["text_norm"] for r in rows]
    bad = round_trip_failures(tok, texts)
    if bad and not cfg.base_model:
        raise RoundTripError(f"{len(bad)} text(s) do not survive encode/decode, e.g. {bad[:3]}")
    if bad:
        log.warning(
            "the base tokenizer changes %d of %d texts on a round trip, e.g. %s",
            len(bad),
            len(texts),
            bad[:3],
        )
    stats: dict[str, Any] = {
        "base_model": cfg.base_model,
        "vocab_size": len(tok),
        "train_texts": len(train),
        "round_trip_checked": len(texts),
        "round_trip_failures": len(bad),
        "chunk_length_s": features.chunk_length,
        "num_mel_bins": features.feature_size,
        **length_stats(tok, texts),
    }
    if stats["over_max_length"]:
        log.warning(
            "%d transcripts are longer than %d tokens (speech_tokenizer.model_max_length)",
            stats["over_max_length"],
            tok.model_max_length,
        )
    with staged_dir(out) as tmp:
        for part in parts:  # all three write transformers' files: tokenizer*, preprocessor_config
            part.save_pretrained(str(tmp))
    write_json(metrics, stats)
    log.info("speech tokenizer: %s", stats)
    return stats


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.speech_tokenizer,
        paths.track("speech").data / "manifest.jsonl",
        paths.track("speech").tokenizer,
        paths.metrics / "speech_tokenizer.json",
    )


if __name__ == "__main__":
    main()
