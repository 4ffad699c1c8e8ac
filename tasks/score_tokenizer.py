"""Stage score_tokenizer: a BPE over canonical LilyPond, trained on the train split only.

Run:    dvc repro score_tokenizer      (or: python -m tasks.score_tokenizer)
Reads:  params.yaml (score_tokenizer, paths), ${paths.track("score").data}/manifest.jsonl
Writes: ${paths.track("score").tokenizer}/ (loads with transformers.AutoTokenizer /
        PreTrainedTokenizerFast), ${paths.metrics}/score_tokenizer.json

The stage fails if any manifest text (any split) does not decode back to itself exactly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sonfolio.config import ScoreTokenizer, load_params
from sonfolio.io import read_jsonl, staged_dir, write_json
from sonfolio.logs import setup_logging
from sonfolio.tokenizer import length_stats, round_trip_failures, save, train_bpe

log = logging.getLogger(__name__)


class RoundTripError(RuntimeError):
    """The tokenizer does not give back some text exactly."""


def run(cfg: ScoreTokenizer, manifest: Path, out: Path, metrics: Path) -> dict[str, Any]:
    rows = read_jsonl(manifest)
    train = [r["text"] for r in rows if r["split"] == "train"]
    if not train:
        raise ValueError(f"{manifest} has no train split: rerun `dvc repro score_data`")
    tok = train_bpe(train, cfg.vocab_size, cfg.min_frequency, cfg.model_max_length)
    texts = [r["text"] for r in rows]
    bad = round_trip_failures(tok, texts)
    if bad:
        raise RoundTripError(f"{len(bad)} text(s) do not survive encode/decode, e.g. {bad[:3]}")
    stats: dict[str, Any] = {
        "vocab_size": tok.vocab_size,
        "train_texts": len(train),
        "round_trip_checked": len(texts),
        "round_trip_failures": 0,
        **length_stats(tok, texts),
    }
    if stats["over_max_length"]:
        log.warning(
            "%d systems are longer than score_tokenizer.model_max_length = %d tokens",
            stats["over_max_length"],
            cfg.model_max_length,
        )
    with staged_dir(out) as tmp:
        save(tok, tmp)
    write_json(metrics, stats)
    log.info("tokenizer: %s", stats)
    return stats


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.score_tokenizer,
        paths.track("score").data / "manifest.jsonl",
        paths.track("score").tokenizer,
        paths.metrics / "score_tokenizer.json",
    )


if __name__ == "__main__":
    main()
