"""Keeping what a base Whisper knows while it is fine-tuned: its parts frozen
(speech_train.model.frozen_encoder_layers and frozen_decoder_layers: what is frozen gets no
gradient, the rest trains) and the KL term towards its token distributions
(speech_train.keep_base, sonfolio.train.keep_base)."""

from __future__ import annotations

import pytest
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from sonfolio.config.train import SpeechModel, SpeechTrain
from sonfolio.speech.model.model import freeze
from sonfolio.train.keep_base import IGNORE, base_copy, kl_to_base


def tiny() -> WhisperForConditionalGeneration:
    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
        max_source_positions=20, max_target_positions=16, decoder_start_token_id=1,
        pad_token_id=0, eos_token_id=2,
    )  # fmt: skip
    return WhisperForConditionalGeneration(config)


def cfg(encoder: int, decoder: int, trains: str = "all") -> SpeechModel:
    return SpeechModel(
        base_model="base", size="tiny", language=None, frozen_encoder_layers=encoder,
        frozen_decoder_layers=decoder, decoder_trains=trains,
    )  # fmt: skip


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([[3, 4, 5, 2], [6, 7, 2, IGNORE]])
    return {"input_features": torch.randn(2, 8, 40, generator=g), "labels": labels}


def grads_after_a_step(model: WhisperForConditionalGeneration) -> set[str]:
    model(**batch()).loss.backward()
    return {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


def test_a_frozen_decoder_keeps_its_language_model_and_the_encoder_trains():
    model = tiny()
    freeze(model, cfg(encoder=1, decoder=2))
    moved = grads_after_a_step(model)
    assert moved, "something must train"
    assert all(n.startswith("model.encoder.layers.1.") or n == "model.encoder.layer_norm.weight"
               or n == "model.encoder.layer_norm.bias" for n in moved), moved  # fmt: skip
    # the output projection is tied to the token embeddings: frozen with them
    assert model.proj_out.weight is model.model.decoder.embed_tokens.weight
    assert not model.proj_out.weight.requires_grad


def test_part_of_the_decoder_frozen_leaves_its_upper_blocks_training():
    model = tiny()
    freeze(model, cfg(encoder=0, decoder=1))
    moved = grads_after_a_step(model)
    assert any(n.startswith("model.decoder.layers.1.") for n in moved)
    assert not any(n.startswith("model.decoder.layers.0.") for n in moved)
    assert any(n.startswith("model.encoder.layers.0.") for n in moved)
    assert "model.decoder.embed_tokens.weight" not in moved


def test_decoder_blocks_training_keep_the_word_priors():
    model = tiny()
    freeze(model, cfg(encoder=2, decoder=0, trains="blocks"))
    moved = grads_after_a_step(model)
    assert {n.split(".")[3] for n in moved if n.startswith("model.decoder.layers.")} == {"0", "1"}
    # the output projection (tied with the embeddings) and the positions stay the base's
    assert not {"model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight"} & moved
    assert "model.decoder.embed_tokens.weight" in {n for n, _ in model.named_parameters()}


def test_cross_attention_only_keeps_the_decoders_language_model():
    model = tiny()
    freeze(model, cfg(encoder=2, decoder=0, trains="cross_attention"))
    moved = grads_after_a_step(model)
    assert moved
    assert all(".encoder_attn." in n or ".encoder_attn_layer_norm." in n for n in moved), moved
    assert {n.split(".")[3] for n in moved} == {"0", "1"}  # in every block


def test_keeping_parts_of_a_base_without_a_base_names_the_fix():
    with pytest.raises(ValueError, match="decoder_trains = 'blocks' keeps parts of a base"):
        SpeechModel(
            base_model=None, size="tiny", language=None, frozen_encoder_layers=0,
            frozen_decoder_layers=0, decoder_trains="blocks",
        )  # fmt: skip


def test_more_frozen_blocks_than_the_model_has_names_the_param():
    with pytest.raises(ValueError, match="frozen_decoder_layers = 3: the decoder has 2 blocks"):
        freeze(tiny(), cfg(encoder=0, decoder=3))


def test_the_kl_term_is_zero_at_the_base_and_skips_padded_positions():
    model = tiny()
    base = base_copy(model, 1.0)
    b = batch()
    assert kl_to_base(base, b, model(**b).logits).item() == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():  # the token embeddings, tied with the output projection
        emb = model.model.decoder.embed_tokens.weight
        emb.add_(torch.randn(emb.shape, generator=torch.Generator().manual_seed(1)))
    logits = model(**b).logits
    moved = kl_to_base(base, b, logits)
    assert moved.item() > 1e-4
    noisy = logits.clone()
    noisy[1, 3] += torch.randn_like(noisy[1, 3]) * 10  # the padded position
    assert kl_to_base(base, b, noisy).item() == pytest.approx(moved.item(), rel=1e-5)
    assert base_copy(model, 0.0) is None


def _trained(weight: float, steps: int = 8) -> tuple[WhisperForConditionalGeneration, float]:
    """`steps` of Adam on one batch, cross-entropy + weight x KL to the starting model; the KL
    of the result to that start."""
    model = tiny()
    base = base_copy(model, 1.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    b = batch()
    for _ in range(steps):
        out = model(**b)
        loss = out.loss + weight * kl_to_base(base, b, out.logits) if weight else out.loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert all(p.grad is None for p in base.parameters())  # the base never trains
    return model, kl_to_base(base, b, model(**b).logits).item()


def test_the_kl_term_holds_the_fine_tune_near_its_base():
    _, free = _trained(0.0)
    _, held = _trained(10.0)
    assert held < free / 3, (held, free)


def test_keep_base_without_a_base_model_fails_naming_both_keys(params):
    cfg = params.speech_train.model_dump()
    cfg["keep_base"] = 0.5
    cfg["model"]["base_model"] = None
    cfg["model"]["decoder_trains"] = "all"  # (the default keeps the base's language model)
    with pytest.raises(ValueError, match="speech_train.keep_base = 0.5.*base_model is null"):
        SpeechTrain.model_validate(cfg)
