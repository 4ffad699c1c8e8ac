"""A model read by its CTC head, as the runtime reads it (sonfolio.variants, the bench's torch
worker): whether a config says so, the head loaded from `ctc_head.safetensors` beside the
weights, its logits and the greedy reading. Training the head (its loss, saving it) is
sonfolio.train.ctc; the torch-free folder format and collapse, sonfolio.ctc_format.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from sonfolio.ctc_format import DECODING, HEAD_FILE, collapse, decodes_with_ctc

HEAD = "ctc_head"  # the attribute (and state-dict prefix) of the head on the model


def load_head(model: PreTrainedModel, folder: Path) -> PreTrainedModel:
    """Attach the head saved in `folder` to a model that decodes with CTC (others: unchanged).

    Raises:
        FileNotFoundError: the config says CTC decoding and `folder` has no ctc_head.safetensors.
    """
    if not decodes_with_ctc(model.config):
        return model
    path = Path(folder) / HEAD_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder}/config.json says {DECODING}: true but {path} is missing: re-save the "
            "model with its CTC head (rerun the training stage)"
        )
    from safetensors.torch import load_file

    state = load_file(str(path))
    weight = state["weight"]
    head = nn.Linear(weight.shape[1], weight.shape[0], dtype=model.dtype, device=model.device)
    head.load_state_dict(state)
    setattr(model, HEAD, head)
    return model


@torch.no_grad()
def logits(model: PreTrainedModel, inputs: torch.Tensor) -> torch.Tensor:
    """The CTC head's logits (B, encoder positions, vocabulary) of `model` (which must have
    one) on a batch."""
    head = getattr(model, HEAD, None)
    if head is None:
        raise ValueError("this model has no CTC head to decode with (ctc_head.safetensors)")
    states = model.get_encoder()(inputs.to(model.device, model.dtype)).last_hidden_state
    return head(states.to(head.weight.dtype))


def greedy(
    model: PreTrainedModel, inputs: torch.Tensor, limit: int | None = None
) -> list[list[int]]:
    """Token ids read by the encoder and the CTC head of `model` (which must have one)."""
    best = logits(model, inputs).argmax(-1).cpu().numpy()
    return collapse(best, model.config.pad_token_id, limit)


def generate_fn(model: PreTrainedModel):
    """A stand-in for `model.generate` (same keywords, greedy only) that decodes with the head."""

    def generate(inputs: torch.Tensor, max_new_tokens: int | None = None, **_: object):
        return greedy(model, inputs, max_new_tokens)

    return generate
