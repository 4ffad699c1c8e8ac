"""The speech model: WhisperForConditionalGeneration, from a base checkpoint or a config.

From a config (the embedded default, no download): sized for a CPU, with an input window that
matches the feature extractor's: `max_source_positions = chunk_length_s * 50` (100 mel frames
per second, halved by the encoder's strided convolution; Whisper's 30 s = 3000 frames = 1500
positions, so the default 8 s = 800 frames = 400 positions). The decoder starts from the
tokenizer's <s> and stops at </s>.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from transformers import PreTrainedTokenizerBase, WhisperConfig, WhisperForConditionalGeneration

from sonfolio.train import models
from sonfolio.train.device import Backend

if TYPE_CHECKING:
    from sonfolio.config.train import SpeechModel

log = logging.getLogger(__name__)

FRAMES_PER_S = 100  # mel frames per second (10 ms hop)


@dataclass(frozen=True)
class Size:
    dim: int
    enc_layers: int
    dec_layers: int
    heads: int
    dropout: float
    gpu_only: bool


SIZES = {  # ~ whisper-tiny is (384, 4, 4, 6); base (512, 6, 6, 8)
    "tiny": Size(128, 2, 2, 4, 0.0, gpu_only=False),
    "small": Size(384, 4, 4, 6, 0.1, gpu_only=True),
    "base": Size(512, 6, 6, 8, 0.1, gpu_only=True),
}


def check_size(stage: str, cfg: SpeechModel, backend: Backend) -> None:
    """Raises DeviceCannotDo for a GPU size (or a base checkpoint) on a CPU."""
    if not cfg.base_model:
        models.check_size(stage, cfg.size, SIZES[cfg.size].gpu_only, backend)


def build(
    cfg: SpeechModel, tokenizer: PreTrainedTokenizerBase, features: Any
) -> WhisperForConditionalGeneration:
    if cfg.base_model:
        model = load_base(cfg.base_model, tokenizer, features, cfg.language)
        freeze(model, cfg)
        return model
    s = SIZES[cfg.size]
    # the text's sizes from the tokenizer, the audio's from the feature extractor, the rest from
    # the size preset, stack by stack
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        max_target_positions=tokenizer.model_max_length,
        num_mel_bins=features.feature_size,
        max_source_positions=features.chunk_length * FRAMES_PER_S // 2,
        d_model=s.dim,
        encoder_layers=s.enc_layers,
        encoder_attention_heads=s.heads,
        encoder_ffn_dim=4 * s.dim,
        decoder_layers=s.dec_layers,
        decoder_attention_heads=s.heads,
        decoder_ffn_dim=4 * s.dim,
        dropout=s.dropout,
        **models.special_tokens(tokenizer),
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )
    model = WhisperForConditionalGeneration(config)
    gen = model.generation_config
    for name, value in models.special_tokens(tokenizer).items():
        setattr(gen, name, value)
    gen.forced_decoder_ids = None
    return model


def load_base(
    name: str, tokenizer: PreTrainedTokenizerBase, features: Any, language: str | None = None
) -> WhisperForConditionalGeneration:
    """A Whisper checkpoint (hub id, HF or CTranslate2 folder, `package:<name>`) whose
    vocabulary matches the speech tokenizer's, its encoder window cut to the feature
    extractor's where that is shorter (the positional table sliced: a base trained on 30 s
    reads a short clip without 20 s of padding, at a third of the encoder's cost).

    Raises:
        ValueError: it cannot be loaded, or it does not match speech_tokenizer's output.
    """
    from sonfolio.speech.model.bases import BaseModelError, resolve

    try:
        source = resolve(name, language)
    except BaseModelError as err:
        raise ValueError(f"speech_train.model.base_model = {name!r}: {err}") from err
    model = models.load(
        WhisperForConditionalGeneration, source, "speech_train.model.base_model", "a Whisper model"
    )
    window = model.config.max_source_positions * 2 // FRAMES_PER_S
    if model.config.num_mel_bins != features.feature_size or features.chunk_length > window:
        raise ValueError(
            f"speech_train.model.base_model = {name!r} takes {model.config.num_mel_bins} mel "
            f"bins over {window} s; the speech processor gives {features.feature_size} over "
            f"{features.chunk_length} s: set speech_tokenizer.base_model to the same model"
        )
    if features.chunk_length < window:
        cut_window(model, features.chunk_length * FRAMES_PER_S // 2)
    if model.get_input_embeddings().num_embeddings < len(tokenizer):
        raise ValueError(
            f"speech_train.model.base_model = {name!r} has a smaller vocabulary than the speech "
            "tokenizer: set speech_tokenizer.base_model to the same model"
        )
    if language and getattr(model.generation_config, "lang_to_id", None):
        model.generation_config.language = language
        model.generation_config.task = "transcribe"
    return model


def cut_window(model: WhisperForConditionalGeneration, positions: int) -> None:
    """Keep the first `positions` encoder positions (2 mel frames each)."""
    import torch

    table = model.model.encoder.embed_positions
    cut = torch.nn.Embedding(positions, table.embedding_dim)
    cut.weight.data.copy_(table.weight.data[:positions])
    cut.requires_grad_(table.weight.requires_grad)
    model.model.encoder.embed_positions = cut
    model.config.max_source_positions = positions
    model.model.encoder.config.max_source_positions = positions
    model.model.encoder.max_source_positions = positions


def freeze(model: WhisperForConditionalGeneration, cfg: SpeechModel) -> None:
    """Leave the parts of a base that the config keeps as they are (no gradients: their backward
    pass is skipped, the largest cost of a step on a CPU): the encoder's convolutions, positions
    and lowest `frozen_encoder_layers` blocks; the decoder's token embeddings (tied with the
    output projection), positions and lowest `frozen_decoder_layers` blocks."""
    _freeze(model, "encoder", cfg.frozen_encoder_layers)
    _freeze(model, "decoder", cfg.frozen_decoder_layers)
    _keep_decoder_parts(model, cfg.decoder_trains)


def _keep_decoder_parts(model: WhisperForConditionalGeneration, trains: str) -> None:
    """`decoder_trains`: blocks keeps the token embeddings (tied with the output projection:
    the word priors) and positions; cross_attention keeps all but each block's attention to
    the audio (encoder_attn and its norm)."""
    if trains == "all":
        return
    decoder = model.model.decoder
    for part in (decoder.embed_tokens, decoder.embed_positions):
        part.requires_grad_(False)
    if trains == "cross_attention":
        for block in decoder.layers:
            for name, child in block.named_children():
                if name not in ("encoder_attn", "encoder_attn_layer_norm"):
                    child.requires_grad_(False)
        decoder.layer_norm.requires_grad_(False)
    trainable = sum(p.numel() for p in decoder.parameters() if p.requires_grad)
    log.info("decoder: %s train; %.1f M of its parameters", trains, trainable / 1e6)


def _freeze(model: WhisperForConditionalGeneration, stack: str, layers: int) -> None:
    if layers <= 0:
        return
    part_of = getattr(model.model, stack)
    blocks = list(part_of.layers)
    if layers > len(blocks):
        raise ValueError(
            f"speech_train.model.frozen_{stack}_layers = {layers}: the {stack} has "
            f"{len(blocks)} blocks"
        )
    if stack == "encoder":
        stem = [part_of.conv1, part_of.conv2, part_of.embed_positions]
    else:
        stem = [part_of.embed_tokens, part_of.embed_positions]
    for part in (*stem, *blocks[:layers]):
        part.requires_grad_(False)
    if layers == len(blocks):
        part_of.layer_norm.requires_grad_(False)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info(
        "%s: %d of %d blocks frozen; %.1f M parameters train",
        stack,
        layers,
        len(blocks),
        trainable / 1e6,
    )


def attention_kernels(model: WhisperForConditionalGeneration) -> str:
    return f"{model.config._attn_implementation} (sdpa picks flash kernels on GPU where it can)"
