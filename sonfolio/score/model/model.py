"""The score model: a ViT encoder over the whole system image, a GPT-2 decoder writing LilyPond.

Built from configs (no download) in three sizes, or loaded from a pretrained
VisionEncoderDecoderModel (hub id or local folder). ViT takes non-square images through
`image_size=(H, W)` and one grey channel; a GPT-2 decoder with cross-attention reads it (both
have SDPA and flash-attention kernels; TrOCR's decoder has neither in transformers 4.57).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import (
    GPT2Config,
    PreTrainedTokenizerBase,
    VisionEncoderDecoderConfig,
    VisionEncoderDecoderModel,
    ViTConfig,
)

from sonfolio.score.model.conv_encoder import ScoreConvConfig
from sonfolio.train import ctc, models
from sonfolio.train.device import Backend

if TYPE_CHECKING:
    from sonfolio.config.train import ScoreModel

log = logging.getLogger(__name__)

CHANNELS = 1  # the score images are grey


@dataclass(frozen=True)
class Size:
    enc_dim: int
    enc_layers: int
    enc_heads: int
    dec_dim: int
    dec_layers: int
    dec_heads: int
    dropout: float
    gpu_only: bool


# parameters: tiny ~1.8 M, small ~25 M, base ~110 M (with a 1000-token vocabulary). tiny has
# one decoder layer: it reads with its CTC head on the CPU (score_train.decode: ctc), and 3
# layers cost 590 ms a step against ~340 ms (the CTC head reads better with the steps saved)
SIZES = {
    "tiny": Size(128, 4, 4, 192, 1, 4, 0.0, gpu_only=False),
    "small": Size(384, 6, 6, 384, 4, 6, 0.1, gpu_only=True),
    "base": Size(768, 12, 12, 512, 6, 8, 0.1, gpu_only=True),
}


def check_size(stage: str, size: str, backend: Backend) -> None:
    """Raises DeviceCannotDo for a GPU size on a CPU."""
    models.check_size(stage, size, SIZES[size].gpu_only, backend)


def build(
    cfg: ScoreModel, tokenizer: PreTrainedTokenizerBase, width: int
) -> VisionEncoderDecoderModel:
    """A model for (cfg.image_height, width) grey images and `tokenizer`'s vocabulary."""
    if cfg.pretrained:
        return load_pretrained(cfg.pretrained, tokenizer)
    s = SIZES[cfg.size]
    dropout = s.dropout if cfg.dropout is None else cfg.dropout
    attention = dropout if cfg.attention_dropout is None else cfg.attention_dropout
    encoder = _encoder_config(cfg, s, width, dropout, attention)
    decoder = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=tokenizer.model_max_length,
        n_embd=s.dec_dim,
        n_layer=s.dec_layers,
        n_head=s.dec_heads,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=attention,
        # from_encoder_decoder_configs makes it a decoder with cross-attention
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    _special_tokens(config, tokenizer)
    model = VisionEncoderDecoderModel(config=config)
    model.generation_config.update(**models.special_tokens(tokenizer))
    return unshifted_loss(model)


def _encoder_config(cfg: ScoreModel, s: Size, width: int, dropout: float, attention: float) -> Any:
    """The encoder's config: ViT with whole-height patches, or the convolutional encoder
    (sonfolio.score.model.conv_encoder: conv blocks, then the size's transformer layers over
    one frame per `2 ** conv.width_pools` px of width).

    Raises:
        ValueError: the image does not divide into the patches or the conv blocks' pools.
    """
    h = cfg.image_height
    if cfg.encoder == "conv":
        conv = ScoreConvConfig(
            image_size=(h, width),
            num_channels=CHANNELS,
            channels=list(cfg.conv.channels),
            width_pools=cfg.conv.width_pools,
            hidden_size=s.enc_dim,
            num_hidden_layers=cfg.conv.layers,
            num_attention_heads=s.enc_heads,
            intermediate_size=4 * s.enc_dim,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=attention,
        )
        if h % 2 ** len(cfg.conv.channels) or width % 2**cfg.conv.width_pools:
            raise ValueError(
                f"the conv encoder halves the height {len(cfg.conv.channels)} times and the "
                f"width {cfg.conv.width_pools} times: {h} x {width} px does not divide; change "
                "score_train.model.conv or image_height"
            )
        return conv
    if h % cfg.patch[0] or width % cfg.patch[1]:
        raise ValueError(
            f"score_train.model.patch = {list(cfg.patch)} must divide the image "
            f"({h} x {width} px): change patch or image_height"
        )
    return ViTConfig(
        image_size=(h, width),
        patch_size=tuple(cfg.patch),
        num_channels=CHANNELS,
        hidden_size=s.enc_dim,
        num_hidden_layers=s.enc_layers,
        num_attention_heads=s.enc_heads,
        intermediate_size=4 * s.enc_dim,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=attention,
    )


def encoder_positions(config: Any) -> int:
    """The encoder's output positions per image: ViT's patches, or the conv encoder's frames."""
    if isinstance(config, ScoreConvConfig):
        return config.frames
    (height, width), (ph, pw) = config.image_size, config.patch_size
    return (height // ph) * (width // pw)


def unshifted_loss(model: VisionEncoderDecoderModel) -> VisionEncoderDecoderModel:
    """Work around transformers 4.57: VisionEncoderDecoderModel's loss falls back to
    ForCausalLMLoss, which shifts the labels a second time (the decoder inputs are already the
    labels shifted right), so the model would learn to predict the token after next. The
    masked-LM loss is the plain token-wise cross-entropy that matches. Set on the instance:
    a model loaded with from_pretrained needs it again before training."""
    model.loss_type = "ForMaskedLM"
    # The ViT pooler's output is never used by the decoder: its parameters get no gradient,
    # which DDP rejects (and they would only cost memory).
    if getattr(model.encoder, "pooler", None) is not None:
        model.encoder.pooler = None
    return model


def _special_tokens(config: VisionEncoderDecoderConfig, tokenizer: PreTrainedTokenizerBase) -> None:
    config.decoder_start_token_id = tokenizer.bos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.vocab_size = len(tokenizer)


def load_pretrained(name: str, tokenizer: PreTrainedTokenizerBase) -> VisionEncoderDecoderModel:
    """A VisionEncoderDecoderModel from the hub or a local folder, its decoder's vocabulary
    resized to `tokenizer`.

    Raises:
        ValueError: it cannot be loaded (the message says what to configure).
    """
    model = models.load(
        VisionEncoderDecoderModel,
        name,
        "score_train.model.pretrained",
        "a VisionEncoderDecoderModel",
    )
    if model.config.encoder.num_channels != CHANNELS:
        raise ValueError(
            f"score_train.model.pretrained = {name!r} takes {model.config.encoder.num_channels}"
            "-channel images; the score images are grey (1 channel): use a 1-channel encoder"
        )
    if model.decoder.get_input_embeddings().num_embeddings != len(tokenizer):
        log.info("resizing the decoder's vocabulary to the score tokenizer (%d)", len(tokenizer))
        model.decoder.resize_token_embeddings(len(tokenizer))
    _special_tokens(model.config, tokenizer)
    model.generation_config.update(**models.special_tokens(tokenizer))
    return unshifted_loss(model)


def load_trained(folder: Path) -> VisionEncoderDecoderModel:
    """A model saved by score_train (or score_qat), ready to train further (the loss fix
    re-applied, the unused pooler dropped, its CTC head attached where it reads with one)."""
    model = VisionEncoderDecoderModel.from_pretrained(str(folder), attn_implementation="sdpa")
    return ctc.load_head(unshifted_loss(model), folder)


def attention_kernels(model: VisionEncoderDecoderModel) -> str:
    enc = model.config.encoder._attn_implementation
    dec = model.config.decoder._attn_implementation
    return f"encoder {enc}, decoder {dec} (sdpa picks flash kernels on GPU where it can)"
