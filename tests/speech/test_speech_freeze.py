"""Freezing a base Whisper's parts (speech_train.model.frozen_encoder_layers and
frozen_decoder_layers): what is frozen gets no gradient, the rest trains."""

from __future__ import annotations

import pytest
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from sonfolio.config.train import SpeechModel
from sonfolio.speech.model.model import freeze


def tiny() -> WhisperForConditionalGeneration:
    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
        max_source_positions=20, max_target_positions=16, decoder_start_token_id=1,
        pad_token_id=0, eos_token_id=2,
    )  # fmt: skip
    return WhisperForConditionalGeneration(config)


def cfg(encoder: int, decoder: int) -> SpeechModel:
    return SpeechModel(
        base_model="base", size="tiny", language=None, frozen_encoder_layers=encoder,
        frozen_decoder_layers=decoder,
    )  # fmt: skip


def grads_after_a_step(model: WhisperForConditionalGeneration) -> set[str]:
    features = torch.randn(2, 8, 40)
    labels = torch.tensor([[3, 4, 5, 2], [6, 7, 2, 0]])
    model(input_features=features, labels=labels).loss.backward()
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


def test_more_frozen_blocks_than_the_model_has_names_the_param():
    with pytest.raises(ValueError, match="frozen_decoder_layers = 3: the decoder has 2 blocks"):
        freeze(tiny(), cfg(encoder=0, decoder=3))
