"""An auxiliary CTC loss on the encoder, for training only (hybrid CTC/attention).

Trained from scratch, an encoder-decoder first learns its decoder as a language model and can
stay there: the cross-attention never finds the input, and every output is the likeliest text
whatever the image or audio (the tiny models did exactly that: one system or one sentence for
every input). A CTC loss on the encoder's states (Watanabe et al. 2017, "Hybrid CTC/attention
architecture for end-to-end speech recognition") makes the encoder emit the labels in order
from the first steps, so the decoder has something to attend to. The loss becomes
`(1 - w) * cross_entropy + w * ctc`; validation and early stopping use the cross-entropy alone.

Neither transformers nor Accelerate has this for encoder-decoder models, hence this module.
The head is a linear layer from the encoder width to the vocabulary, registered on the model
(so the optimizer, DDP and checkpoints see it) and removed before the model is saved: the
saved model is the plain transformers class. Blank is the pad token, which is never a label.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

log = logging.getLogger(__name__)

HEAD = "ctc_head"  # the attribute (and state-dict prefix) of the head on the model


def attach(model: PreTrainedModel) -> nn.Linear:
    """Add a CTC head from the encoder width to the vocabulary (seeded by the caller's RNG)."""
    if model.config.pad_token_id is None:
        raise ValueError("CTC needs a pad token (used as blank): the tokenizer has none")
    width = model.get_encoder().config.hidden_size
    vocab = model.get_output_embeddings().weight.shape[0]
    head = nn.Linear(width, vocab)
    setattr(model, HEAD, head)
    log.info("CTC head: %d -> %d (blank = pad id %d)", width, vocab, model.config.pad_token_id)
    return head


def detach(model: PreTrainedModel) -> None:
    """Remove the head (before save_pretrained: the saved model is the plain class)."""
    if hasattr(model, HEAD):
        delattr(model, HEAD)


def ctc_loss(
    head: nn.Linear,
    encoder_states: torch.Tensor,
    labels: torch.Tensor,
    blank: int,
    ignore: tuple[int, ...],
    pool: int = 1,
) -> torch.Tensor:
    """Mean CTC loss per target token over the batch.

    encoder_states: (B, T, C); labels: (B, L) with -100 padding. Tokens in `ignore` (the end
    token) are not CTC targets. `pool` > 1 averages that many neighbouring states first (T /
    pool frames): the head's matmul, softmax and the CTC lattice all shrink by that factor.
    A sample whose targets cannot fit the frames contributes 0 (zero_infinity), so one long
    outlier does not poison the batch.
    """
    if pool > 1:
        encoder_states = F.avg_pool1d(
            encoder_states.transpose(1, 2), pool, pool, ceil_mode=True
        ).transpose(1, 2)
    logp = head(encoder_states).float().log_softmax(-1).transpose(0, 1)  # (T, B, V)
    keep = labels >= 0
    for token in ignore:
        keep &= labels != token
    targets = labels[keep]  # (sum of target lengths,)
    target_lengths = keep.sum(1)
    input_lengths = torch.full(
        (labels.shape[0],), logp.shape[0], dtype=torch.long, device=labels.device
    )
    return F.ctc_loss(
        logp,
        targets,
        input_lengths,
        target_lengths,
        blank=blank,
        reduction="mean",
        zero_infinity=True,
    )


def joint(
    ce: torch.Tensor,
    outputs: object,
    labels: torch.Tensor,
    head: nn.Linear,
    weight: float,
    blank: int,
    ignore: tuple[int, ...],
    pool: int = 1,
) -> torch.Tensor:
    """(1 - weight) * ce + weight * ctc over the encoder states of `outputs`."""
    states = outputs.encoder_last_hidden_state  # (B, T, C): Seq2SeqLMOutput
    return (1.0 - weight) * ce + weight * ctc_loss(head, states, labels, blank, ignore, pool)
