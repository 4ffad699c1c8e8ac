"""Stage tokenizer: one track's tokenizer (and what else turns its inputs into model inputs),
checked on every manifest text.

Run:    dvc repro tokenizer       (every track: tokenizer@score, tokenizer@speech)
        python -m tasks.tokenizer score
Reads:  params.yaml (<track>_tokenizer, paths), ${paths.tracks.<track>.data}/manifest.jsonl;
        speech: the base model when speech_tokenizer.base_model is set (a hub id or a folder)
Writes: ${paths.tracks.<track>.tokenizer}/ (loads with transformers' AutoTokenizer; speech also
        AutoFeatureExtractor), ${paths.metrics}/<track>_tokenizer.json

The track's tokenizer face builds it (`build_tokenizer`): a BPE trained on the train split here,
or a base model's taken as it is. Every text of the manifest's `text_columns` (any split) must
decode back to itself exactly: a failure is fatal for a tokenizer trained here, counted and
logged for a base model's.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio import tracks
from sonfolio.config.stage import load_sections
from sonfolio.config.tokenizer import TokenizerParams
from sonfolio.io import read_jsonl, staged_dir, write_json
from sonfolio.logs import setup_logging
from sonfolio.tokenizer import length_stats, round_trip_failures

if TYPE_CHECKING:
    from sonfolio.faces import TokenizerFace  # annotations only: no stage dep

log = logging.getLogger(__name__)


class RoundTripError(RuntimeError):
    """The tokenizer does not give back some text exactly."""


def run(cfg: Any, track: TokenizerFace, manifest: Path, out: Path, metrics: Path) -> dict[str, Any]:
    """Build `track`'s tokenizer from `cfg` (its <track>_tokenizer section) and the manifest,
    check it, save it to `out` (replaced only on success) and its stats to `metrics`.

    Raises:
        ValueError: the manifest has no train split. RoundTripError: a text does not survive
        encode/decode (a tokenizer trained here). What the track's build raises (speech:
        ClipTooLong, BaseModelUnavailable).
    """
    rows = read_jsonl(manifest)
    train = [r["text"] for r in rows if r["split"] == "train"]
    if not train:
        raise ValueError(f"{manifest} has no train split: rerun `dvc repro data@{track.name}`")
    built = track.build_tokenizer(cfg, train, rows)
    tok = built.tokenizer
    texts = [r[column] for column in track.text_columns for r in rows]
    bad = round_trip_failures(tok, texts)
    if bad and built.exact:
        raise RoundTripError(f"{len(bad)} text(s) do not survive encode/decode, e.g. {bad[:3]}")
    if bad:
        log.warning(
            "the base tokenizer changes %d of %d texts on a round trip, e.g. %s",
            len(bad),
            len(texts),
            bad[:3],
        )
    stats: dict[str, Any] = {
        **built.stats,
        "train_texts": len(train),
        "round_trip_checked": len(texts),
        "round_trip_failures": len(bad),
        **length_stats(tok, texts),
    }
    if stats["over_max_length"]:
        log.warning(
            "%d texts are longer than %d tokens (%s_tokenizer.model_max_length)",
            stats["over_max_length"],
            tok.model_max_length,
            track.name,
        )
    with staged_dir(out) as tmp:
        for part in built.parts:  # transformers' files: tokenizer*, preprocessor_config.json
            part.save_pretrained(str(tmp))
    write_json(metrics, stats)
    log.info("%s tokenizer: %s", track.name, stats)
    return stats


def main() -> None:
    setup_logging()
    track = tracks.from_argv(sys.argv[1:], "tokenizer")
    params = load_sections(TokenizerParams)
    paths = params.paths.track(track)
    run(
        params.section(track, "tokenizer"),
        tracks.face(track, "tokenizer"),
        paths.data / "manifest.jsonl",
        paths.tokenizer,
        params.paths.metrics / f"{track}_tokenizer.json",
    )


if __name__ == "__main__":
    main()
