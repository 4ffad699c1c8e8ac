"""Greedy decoding of a split and its error rates, shared by both tracks.

Score: token error rate (TER), the word error rate over LilyPond symbols (the canonical text's
space-separated tokens: `\\clef`, `treble`, `g'4`, `|`, ...), so one wrong pitch or duration
costs one symbol. Speech: character error rate (CER) and WER after `normalize` on both sides
(docs/speech.md). Both via jiwer; 0 is perfect, and an empty output scores 1.0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import jiwer
import torch
from rich.progress import Progress
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sonfolio.train.samples import INDICES, model_inputs


@dataclass(frozen=True)
class Decoded:
    """One variant's greedy outputs on one split: what a track's eval scorer scores."""

    variant: str  # the variant's name, e.g. "fp32"
    split: str
    rows: list[dict]  # the manifest rows decoded
    hyps: list[str]  # their outputs, in row order
    decode_s: float  # wall-clock seconds the decoding took


@torch.no_grad()
def greedy_decode(
    model: PreTrainedModel,
    batches: Iterable[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    input_key: str,
    max_new_tokens: int,
    total: int,
    generate: Callable[..., torch.Tensor] | None = None,
) -> tuple[list[int], list[str]]:
    """(dataset indices, texts) decoded greedily (one beam, no sampling) for every readable
    sample of `batches`."""
    model.eval()
    device = next(model.parameters()).device
    run = generate or model.generate
    texts: list[str] = []
    indices: list[int] = []
    with Progress(transient=True) as bar:
        task = bar.add_task("greedy decoding", total=total)
        for batch in batches:
            inputs = model_inputs(batch)[input_key].to(device)
            ids = run(inputs, max_new_tokens=max_new_tokens, num_beams=1, do_sample=False)
            texts += tokenizer.batch_decode(ids, skip_special_tokens=True)
            indices += batch[INDICES]
            bar.advance(task, len(inputs))
    return indices, texts


def token_error_rate(refs: list[str], hyps: list[str]) -> float:
    """Symbol-level error rate of LilyPond texts (insertions + deletions + substitutions)."""
    return float(jiwer.wer(refs, [h if h.strip() else "<empty>" for h in hyps]))


def char_error_rate(refs: list[str], hyps: list[str]) -> float:
    return float(jiwer.cer(refs, [h if h.strip() else " " for h in hyps]))


def word_error_rate(refs: list[str], hyps: list[str]) -> float:
    return float(jiwer.wer(refs, [h if h.strip() else "<empty>" for h in hyps]))


def most_common(texts: list[str]) -> str:
    """The most frequent text (ties: the first seen): a guess that ignores the input."""
    counts: dict[str, int] = {}
    for t in texts:
        counts[t] = counts.get(t, 0) + 1
    return max(counts, key=counts.__getitem__)


def examples(refs: list[str], hyps: list[str], n: int = 3) -> list[dict[str, str]]:
    return [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps, strict=True))[:n]]
