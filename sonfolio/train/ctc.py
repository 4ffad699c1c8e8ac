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
(so the optimizer, DDP and checkpoints see it). Blank is the pad token, which is never a label.

Decoding with the head. A model whose config says `ctc_decoding: true` (score_train.decode:
ctc) is read by its encoder and this head, greedily (the best label per encoder position,
repeats merged, blanks dropped: Graves et al. 2006), or by a search constrained by the
canonical grammar (sonfolio.score.decode, over `logits`), not by its attention decoder. The
saved folder is the plain transformers class as ever (`save_pretrained`, which any
transformers or optimum loader reads) and the head beside it in `ctc_head.safetensors`
(`save_pretrained` here, `load_head` in sonfolio.ctc_head); the export stages add the head
to the encoder's ONNX graph as a second output, `ctc_logits` (sonfolio.export.fp32.
add_ctc_output). Otherwise the head is a training aid, dropped before the model is saved.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

# reading a model with its head is the runtime's (sonfolio.ctc_head); re-exported here for the
# training modules that also read with it
from sonfolio.ctc_format import DECODING, HEAD_FILE, collapse, folder_decoding  # noqa: F401
from sonfolio.ctc_head import (  # noqa: F401
    HEAD,
    decodes_with_ctc,
    generate_fn,
    greedy,
    load_head,
    logits,
)

log = logging.getLogger(__name__)


def set_decoding(model: PreTrainedModel, decode: str) -> None:
    """Record in the model's config how it is read: "ctc" (its CTC head) or "attention"."""
    setattr(model.config, DECODING, decode == "ctc")


def attach(model: PreTrainedModel) -> nn.Linear:
    """Add a CTC head from the encoder width to the vocabulary (seeded by the caller's RNG);
    a model that has one (loaded with `load_head`) keeps it."""
    if model.config.pad_token_id is None:
        raise ValueError("CTC needs a pad token (used as blank): the tokenizer has none")
    if isinstance(getattr(model, HEAD, None), nn.Module):
        return getattr(model, HEAD)
    width = model.get_encoder().config.hidden_size
    vocab = model.get_output_embeddings().weight.shape[0]
    head = nn.Linear(width, vocab)
    setattr(model, HEAD, head)
    log.info("CTC head: %d -> %d (blank = pad id %d)", width, vocab, model.config.pad_token_id)
    return head


def head_state(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The head's tensors ("weight", "bias") out of a whole model's state dict."""
    prefix = HEAD + "."
    return {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}


def save_head(state: dict[str, torch.Tensor], folder: Path) -> None:
    """Write the head's tensors into `folder/ctc_head.safetensors`."""
    from safetensors.torch import save_file

    if set(state) != {"weight", "bias"}:
        raise ValueError(f"a CTC head has a weight and a bias, got {sorted(state)}")
    save_file(
        {k: v.detach().float().cpu().contiguous() for k, v in state.items()},
        str(folder / HEAD_FILE),
    )


def save_pretrained(
    model: PreTrainedModel, folder: Path, state_dict: dict[str, torch.Tensor] | None = None
) -> None:
    """`model.save_pretrained(folder)` without the head; a CTC-decoding model's head beside it.

    `state_dict`: the weights to save instead of the model's own (the engine passes the ones
    Accelerate gathered across processes), head included where it has one.
    """
    if state_dict is None:
        state_dict = model.state_dict()
    head = head_state(state_dict)
    weights = {k: v for k, v in state_dict.items() if not k.startswith(HEAD + ".")}
    model.save_pretrained(str(folder), state_dict=weights, safe_serialization=True)
    if decodes_with_ctc(model.config):
        if not head:
            raise ValueError(f"the model decodes with CTC ({DECODING}) but has no CTC head")
        save_head(head, folder)


def freeze_decoder(model: PreTrainedModel) -> int:
    """For training by CTC alone: every parameter outside the encoder and the head stops
    taking gradients (the optimizer, DDP and weight decay leave it as it is). Returns how many
    parameters were frozen."""
    frozen = 0
    for name, param in model.named_parameters():
        if not name.startswith(("encoder.", HEAD + ".")):
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen


def encoder_only(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    head: nn.Linear,
    start_id: int,
    blank: int,
    ignore: tuple[int, ...],
    pool: int = 1,
) -> torch.Tensor:
    """The CTC loss alone, the decoder run on its start token only. The call goes through
    `model` (not its encoder) so that a DDP or torch.compile wrapper sees the forward pass it
    wraps; one decoder position costs next to nothing beside the labels' ~40."""
    labels = batch["labels"]
    start = torch.full((labels.shape[0], 1), start_id, dtype=torch.long, device=labels.device)
    outputs = model(pixel_values=batch["pixel_values"], decoder_input_ids=start)
    states = outputs.encoder_last_hidden_state
    return ctc_loss(head, states, labels, blank, ignore, pool)


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
