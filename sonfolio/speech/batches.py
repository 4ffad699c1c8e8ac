"""Speech clips as model inputs: Whisper log-mel features over the fixed window, and labels.

Features are computed in the DataLoader's worker processes (WhisperFeatureExtractor, torch
STFT), so they overlap the training step. Labels are the transcript as written (`text`, digits
and punctuation included: what the model must write), without a leading decoder start token
(the model prepends it when it shifts the labels right); padding is -100 (ignored).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import PreTrainedTokenizerBase

from sonfolio.speech.audio import SAMPLE_RATE, AudioError, decode
from sonfolio.train.engine import INDICES, SKIPPED, TOKENS

log = logging.getLogger(__name__)


def label_ids(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], start_id: int
) -> list[list[int]]:
    ids = tokenizer(texts, add_special_tokens=True)["input_ids"]
    return [x[1:] if x and x[0] == start_id else x for x in ids]


class SpeechClips(Dataset):
    """Rows of the speech manifest (one split) as (log-mel features, label ids).

    A clip that cannot be decoded comes back as {"index": i, "error": ...}; the collate
    function drops it and lists it, and the engine counts and caps such samples.
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        root: Path,
        features: Any,
        tokenizer: PreTrainedTokenizerBase,
        start_id: int,
        max_tokens: int,
    ) -> None:
        labels = label_ids(tokenizer, [r["text"] for r in rows], start_id)
        keep = [i for i, x in enumerate(labels) if len(x) <= max_tokens]
        self.too_long = len(rows) - len(keep)
        if self.too_long:
            log.warning("%d transcripts longer than %d tokens left out", self.too_long, max_tokens)
        self.rows = [rows[i] for i in keep]
        self.labels = [labels[i] for i in keep]
        self._cache: list[dict[str, Any]] | None = None
        self.root, self.features = root, features

    def __len__(self) -> int:
        return len(self.rows)

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

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self._cache[i] if self._cache is not None else self._load(i)

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

    def longest(self) -> int:
        return max(range(len(self)), key=lambda i: len(self.labels[i]))


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    good = [x for x in items if "error" not in x]
    if not good:
        raise ValueError(f"every clip of a batch is unusable: {[x['index'] for x in items]}")
    longest = max(len(x["labels"]) for x in good)
    labels = torch.full((len(good), longest), -100, dtype=torch.long)
    for row, x in enumerate(good):
        labels[row, : len(x["labels"])] = torch.tensor(x["labels"])
    return {
        "input_features": torch.from_numpy(np.stack([x["features"] for x in good])),
        "labels": labels,
        SKIPPED: [x["index"] for x in items if "error" in x],
        INDICES: [x["index"] for x in good],
        TOKENS: sum(len(x["labels"]) for x in good),
    }
