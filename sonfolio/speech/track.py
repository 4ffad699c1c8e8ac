"""The speech track as the training engine sees it: model, datasets of every split, tokenizer
and feature extractor.

Shared by speech_train, speech_qat and `sonfolio estimate`, so that each reads the data exactly
as training does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from accelerate.utils import set_seed
from transformers import AutoFeatureExtractor, AutoTokenizer, WhisperForConditionalGeneration

from sonfolio.config import SpeechTrain
from sonfolio.io import read_jsonl
from sonfolio.speech.batches import SpeechClips, collate
from sonfolio.speech.model import attention_kernels, build
from sonfolio.train.engine import Track

log = logging.getLogger(__name__)

EVAL_SPLITS = ("test",)  # decoded after training: unseen sentences and voices


def make_track(
    cfg: SpeechTrain,
    data: Path,
    processor_dir: Path,
    model: WhisperForConditionalGeneration | None = None,
    name: str = "speech_train",
) -> tuple[Track, dict, Any, Any]:
    """The model (seeded; or `model`, e.g. a QAT-prepared one), the datasets of every split,
    the tokenizer and feature extractor."""
    tok = AutoTokenizer.from_pretrained(str(processor_dir))
    features = AutoFeatureExtractor.from_pretrained(str(processor_dir))
    rows = read_jsonl(data / "manifest.jsonl")
    set_seed(cfg.seed)
    model = model if model is not None else build(cfg.model, tok, features)
    start = model.config.decoder_start_token_id
    max_tokens = model.config.max_target_positions
    sets = {
        split: SpeechClips(
            [r for r in rows if r["split"] == split], data, features, tok, start, max_tokens
        )
        for split in ("train", "val", *EVAL_SPLITS)
    }
    if not len(sets["train"]) or not len(sets["val"]):
        raise ValueError(
            f"{data}/manifest.jsonl needs train and val rows: rerun `dvc repro data@speech`"
        )
    train_set = sets["train"]
    longest = train_set[train_set.longest()]
    mean_tokens = sum(map(len, train_set.labels)) / len(train_set)
    enc = model.model.encoder.num_parameters()
    positions = model.config.max_source_positions
    track = Track(
        model=model,
        train_set=train_set,
        val_set=sets["val"],
        collate=collate,
        probe_batch=lambda n: collate([longest] * n),
        flops_per_sample=6 * (enc * positions + (model.num_parameters() - enc) * mean_tokens),
        shape=f"{features.feature_size}x{features.chunk_length}s",
        name=name,
        lengths=[len(x) for x in train_set.labels],
    )
    log.info(
        "speech model: %.2f M parameters; attention: %s",
        model.num_parameters() / 1e6,
        attention_kernels(model),
    )
    return track, sets, tok, features
