"""Labelled samples and their batches: what a track's datasets hand the training engine.

A manifest row is read as {"index", <its input>, "labels"}, or as {"index", "error"} when its
file cannot be read; `collate` drops the unreadable ones and lists them under SKIPPED, and the
engine counts and caps them. Labels are the tokenizer's ids without the leading start token
(the model prepends its decoder_start_token_id when it shifts the labels right), ending in the
end token; in a batch they are padded with -100, which the loss ignores.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

SKIPPED = "skipped"  # the collate functions' key for the indices of corrupt samples
TOKENS = "tokens"  # and for the number of label tokens (an int, counted on the host)
INDICES = "indices"  # and for the dataset indices of the samples in the batch


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch as the model takes it: without the keys only the engine reads."""
    return {k: v for k, v in batch.items() if k not in (SKIPPED, TOKENS, INDICES)}


def label_ids(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], start_id: int
) -> list[list[int]]:
    """The tokenizer's ids of each text, without a leading `start_id`."""
    if not texts:  # an empty split (a fast tokenizer's batch call fails on an empty list)
        return []
    ids = tokenizer(texts, add_special_tokens=True)["input_ids"]
    return [x[1:] if x and x[0] == start_id else x for x in ids]


class LabelledRows(Dataset):
    """Manifest rows of one split with their label ids; a track's dataset reads each row's
    input in `_load(i)`. Rows whose labels are longer than the decoder's `max_tokens` are left
    out (counted in `too_long` and logged: `what` names them, "systems" or "transcripts")."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        tokenizer: PreTrainedTokenizerBase,
        start_id: int,
        max_tokens: int,
        what: str,
    ) -> None:
        labels = label_ids(tokenizer, [r["text"] for r in rows], start_id)
        keep = [i for i, x in enumerate(labels) if len(x) <= max_tokens]
        self.too_long = len(rows) - len(keep)
        if self.too_long:
            log.warning("%d %s longer than %d tokens left out", self.too_long, what, max_tokens)
        self.rows = [rows[i] for i in keep]
        self.labels = [labels[i] for i in keep]
        self._cache: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self._cache[i] if self._cache is not None else self._load(i)

    def _load(self, i: int) -> dict[str, Any]:
        """Row `i` as {"index": i, <its input>, "labels"}; a row whose file cannot be read as
        the error marker {"index": i, "error": ...}, which `collate` drops and lists, and the
        engine counts and caps."""
        raise NotImplementedError

    def preload(self) -> None:
        """Read every sample once and keep it in memory (the CPU default; see
        sonfolio.train.speed.loader_workers). Unreadable ones stay error markers."""
        if self._cache is None:
            self._cache = [self._load(i) for i in range(len(self))]

    def longest(self) -> int:
        """The index of the sample with the most label tokens (the probe batch's)."""
        return max(range(len(self)), key=lambda i: len(self.labels[i]))


def collate(
    items: list[dict[str, Any]],
    key: str,
    inputs: Callable[[list[dict[str, Any]]], torch.Tensor],
    nothing: str,
) -> dict[str, Any]:
    """A batch of the readable `items`: `inputs(items)` under `key`, the labels padded with
    -100, and the engine's keys (the unreadable indices, the readable ones, the label tokens).

    Raises:
        ValueError: no item is readable (`nothing` says so, with their indices).
    """
    good = [x for x in items if "error" not in x]
    if not good:
        raise ValueError(f"{nothing}: {[x['index'] for x in items]}")
    longest = max(len(x["labels"]) for x in good)
    labels = torch.full((len(good), longest), -100, dtype=torch.long)
    for row, x in enumerate(good):
        labels[row, : len(x["labels"])] = torch.tensor(x["labels"])
    return {
        key: inputs(good),
        "labels": labels,
        SKIPPED: [x["index"] for x in items if "error" in x],
        INDICES: [x["index"] for x in good],
        TOKENS: sum(len(x["labels"]) for x in good),
    }
