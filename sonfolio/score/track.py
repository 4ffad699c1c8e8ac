"""The score track as the training engine sees it: model, datasets of every split, tokenizer.

Shared by score_train, score_qat and `sonfolio estimate`, so that each reads the data exactly
as training does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from accelerate.utils import set_seed
from transformers import AutoTokenizer, VisionEncoderDecoderModel

from sonfolio.config import ScoreTrain
from sonfolio.io import read_jsonl
from sonfolio.score.batches import ScoreSystems, collate
from sonfolio.score.model import attention_kernels, build
from sonfolio.train import ctc
from sonfolio.train.engine import Track

log = logging.getLogger(__name__)

EVAL_SPLITS = ("heldout", "test")  # decoded after training: whole unseen collections, and test


def make_track(
    cfg: ScoreTrain,
    data: Path,
    tokenizer_dir: Path,
    width: int,
    model: VisionEncoderDecoderModel | None = None,
    name: str = "score_train",
) -> tuple[Track, dict[str, ScoreSystems], Any]:
    """The model (seeded, marked to decode as `cfg.decode` says; or `model`, e.g. a
    QAT-prepared one), the datasets of every split, and the tokenizer."""
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rows = read_jsonl(data / "manifest.jsonl")
    set_seed(cfg.seed)
    if model is None:
        model = build(cfg.model, tok, width)
        ctc.set_decoding(model, cfg.decode)
    shape = tuple(model.config.encoder.image_size)
    max_tokens = getattr(model.config.decoder, "n_positions", None) or 10**9
    sets = {
        split: ScoreSystems(
            [r for r in rows if r["split"] == split],
            data,
            tok,
            model.config.decoder_start_token_id,
            shape,
            max_tokens,
        )
        for split in ("train", "val", *EVAL_SPLITS)
    }
    if not len(sets["train"]) or not len(sets["val"]):
        raise ValueError(
            f"{data}/manifest.jsonl needs train and val rows: rerun `dvc repro data@score`"
        )
    train_set = sets["train"]
    longest = train_set[train_set.longest()]
    mean_tokens = sum(map(len, train_set.labels)) / len(train_set)
    patches = model.config.encoder.image_size[0] // model.config.encoder.patch_size[0]
    patches *= model.config.encoder.image_size[1] // model.config.encoder.patch_size[1]
    enc = model.encoder.num_parameters()
    track = Track(
        model=model,
        train_set=train_set,
        val_set=sets["val"],
        collate=collate,
        probe_batch=lambda n: collate([longest] * n),
        flops_per_sample=6 * (enc * patches + (model.num_parameters() - enc) * mean_tokens),
        shape=f"{shape[0]}x{shape[1]}",
        name=name,
        lengths=[len(x) for x in train_set.labels],
    )
    log.info(
        "score model: %.2f M parameters; attention: %s",
        model.num_parameters() / 1e6,
        attention_kernels(model),
    )
    return track, sets, tok
