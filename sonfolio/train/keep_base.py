"""A fine-tune held near its base: a KL term between the untouched base's next-token
distributions and the model's, at every label position of the batch (teacher forcing).

Fine-tuning a pretrained Whisper on synthetic speech moves its decoder's language model towards
the synthetic sentences (docs/training.md, "Keeping real speech"); this term pulls each
position's distribution back towards what the base predicts there, from the same audio and
prefix, while the cross-entropy pulls towards the transcript. Written here (a few lines over
two forward passes): transformers' Trainer and Accelerate have no such loss.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

IGNORE = -100  # label positions the loss skips (padding), as transformers' models mark them


def base_copy(model: torch.nn.Module, weight: float) -> torch.nn.Module | None:
    """A frozen copy of `model` as it is now (the base, before any step), or None when
    `weight` is 0."""
    if weight <= 0:
        return None
    base = copy.deepcopy(model).eval()
    base.requires_grad_(False)
    return base


def kl_to_base(base: torch.nn.Module, batch: dict[str, Any], logits: torch.Tensor) -> torch.Tensor:
    """Mean over the batch's label positions of KL(base || model), in nats a token."""
    base.to(logits.device)
    with torch.no_grad():
        reference = base(**batch).logits.float()
    keep = batch["labels"] != IGNORE
    ours = F.log_softmax(logits.float()[keep], dim=-1)
    theirs = F.log_softmax(reference[keep], dim=-1)
    return F.kl_div(ours, theirs, log_target=True, reduction="sum") / max(int(keep.sum()), 1)
