"""Speech clips as model inputs: Whisper log-mel features over the fixed window, and labels.

Features are computed in the DataLoader's worker processes (WhisperFeatureExtractor, torch
STFT), so they overlap the training step. Labels are the transcript as written (`text`, digits
and punctuation included: what the model must write), as every track's labels
(sonfolio.train.samples): without a leading decoder start token, padded with -100.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from sonfolio.speech.common.audio import SAMPLE_RATE, AudioError, decode
from sonfolio.train import samples
from sonfolio.train.samples import LabelledRows

log = logging.getLogger(__name__)


class SpeechClips(LabelledRows):
    """Rows of the speech manifest (one split) as (log-mel features, label ids); a clip that
    cannot be decoded is an error marker (LabelledRows._load)."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        root: Path,
        features: Any,
        tokenizer: PreTrainedTokenizerBase,
        start_id: int,
        max_tokens: int,
    ) -> None:
        super().__init__(rows, tokenizer, start_id, max_tokens, "transcripts")
        self.root, self.features = root, features

    def preload(self, chunk: int = 64) -> None:
        """Decode every clip once and keep its features in memory (the CPU default; see
        sonfolio.train.speed.loader_workers), `chunk` clips per feature-extractor call (one
        batched STFT is ~10x faster than one per clip). Unusable clips stay error markers."""
        if self._cache is not None:
            return
        cache: list[dict[str, Any]] = []
        for start in range(0, len(self), chunk):
            items = [self._decode(i) for i in range(start, min(start + chunk, len(self)))]
            good = [x for x in items if "error" not in x]
            if good:
                out = self.features([x.pop("audio") for x in good], sampling_rate=SAMPLE_RATE)
                for x, feats in zip(good, out["input_features"], strict=True):
                    x["features"] = np.asarray(feats, dtype=np.float32)
            cache += items
        self._cache = cache

    def features_of(self, audio: np.ndarray) -> np.ndarray:
        """(num_mel_bins, frames of the whole window) float32."""
        out = self.features(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")
        return out["input_features"][0].astype(np.float32, copy=False)

    def _decode(self, i: int) -> dict[str, Any]:
        path = self.root / self.rows[i]["audio"]
        try:
            audio = decode(path)
        except AudioError as err:
            log.debug("unusable clip %s: %s", path, err)
            return {"index": i, "error": str(err)}
        return {"index": i, "audio": audio, "labels": self.labels[i]}

    def _load(self, i: int) -> dict[str, Any]:
        item = self._decode(i)
        if "audio" in item:
            item["features"] = self.features_of(item.pop("audio"))
        return item


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch of clips (sonfolio.train.samples.collate): features (B, mel bins, frames)."""
    return samples.collate(
        items,
        "input_features",
        lambda good: torch.from_numpy(np.stack([x["features"] for x in good])),
        "every clip of a batch is unusable",
    )
