"""What a model read by its CTC head looks like on disk, and the greedy CTC collapse.

Torch-free on purpose: the ONNX runtimes (sonfolio.infer.ortloop, the export stage, the bench's
worker processes) read CTC models without importing torch, whose ~300 MB would land in every
bench worker's measured memory. The torch side (the head, its loss, saving and loading it) is
sonfolio.train.ctc.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HEAD_FILE = "ctc_head.safetensors"  # the head of a CTC-reading model, beside its weights
DECODING = "ctc_decoding"  # config.json key: true when the model is read by its CTC head
CTC_OUTPUT = "ctc_logits"  # the exported encoder's second output (sonfolio.export)


def decodes_with_ctc(config: object) -> bool:
    """Whether a model (by its config: transformers' or sonfolio.model_folder's) is read by its
    CTC head."""
    return bool(getattr(config, DECODING, False))


def folder_decoding(folder: Path) -> tuple[bool, int | None]:
    """(whether the model saved in `folder` is read by its CTC head, its blank id), from
    its config.json alone: for callers that have not loaded the model."""
    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    return bool(config.get(DECODING)), config.get("pad_token_id")


def collapse(ids: np.ndarray, blank: int, limit: int | None = None) -> list[list[int]]:
    """Greedy CTC output: per row of best labels (B, T), repeats merged and blanks dropped,
    at most `limit` tokens a row."""
    rows = []
    for row in np.asarray(ids):
        keep = row != blank
        keep[1:] &= row[1:] != row[:-1]
        rows.append(row[keep][:limit].tolist())
    return rows
