"""The convolutional score encoder: one frame per 4 px of width in reading order, saved and
loaded as a VisionEncoderDecoderModel's encoder, exported by optimum to an ONNX graph that
computes what torch computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GPT2Config, VisionEncoderDecoderConfig, VisionEncoderDecoderModel

from sonfolio.score.model.conv_encoder import ScoreConvConfig, ScoreConvModel, register_onnx
from sonfolio.tokenizer import train_bpe

SHAPE = (96, 320)


def encoder_decoder(tmp: Path) -> tuple[VisionEncoderDecoderModel, Path]:
    torch.manual_seed(0)
    tok = train_bpe(["\\clef treble \\key c \\major c'4 d'4 e'4 f'4"] * 8, 300, 1, 64)
    dec = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=64, n_layer=1, n_head=2,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id)  # fmt: skip
    cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(
        ScoreConvConfig(image_size=SHAPE, hidden_size=64, num_attention_heads=2), dec
    )
    cfg.decoder_start_token_id, cfg.pad_token_id = tok.bos_token_id, tok.pad_token_id
    cfg.eos_token_id = tok.eos_token_id
    model = VisionEncoderDecoderModel(config=cfg).eval()
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return model, tmp


def test_frames_follow_the_width_in_reading_order():
    torch.manual_seed(0)
    enc = ScoreConvModel(ScoreConvConfig(image_size=SHAPE, hidden_size=64, num_attention_heads=2))
    enc.eval()
    x = torch.zeros(1, 1, *SHAPE)
    assert enc(x).last_hidden_state.shape == (1, SHAPE[1] // 4, 64)
    # ink at the right end changes the last frames far more than the first ones
    ink = x.clone()
    ink[..., 40:56, -16:] = 1.0
    moved = (enc(ink).last_hidden_state - enc(x).last_hidden_state).norm(dim=-1)[0]
    assert moved[-8:].mean() > 3 * moved[:8].mean()


def test_saved_and_loaded_as_the_encoder_of_a_vision_encoder_decoder(tmp_path):
    model, folder = encoder_decoder(tmp_path)
    again = VisionEncoderDecoderModel.from_pretrained(folder).eval()
    assert isinstance(again.encoder, ScoreConvModel)
    x = torch.rand(2, 1, *SHAPE)
    with torch.no_grad():
        assert torch.equal(again.encoder(x).last_hidden_state, model.encoder(x).last_hidden_state)


@pytest.mark.slow
def test_optimum_exports_an_encoder_graph_that_computes_what_torch_does(tmp_path):
    import onnxruntime as ort
    from optimum.exporters.onnx import main_export
    from transformers import ViTImageProcessor

    model, folder = encoder_decoder(tmp_path / "model")
    ViTImageProcessor(size={"height": SHAPE[0], "width": SHAPE[1]}).save_pretrained(folder)
    register_onnx()
    main_export(str(folder), str(tmp_path / "onnx"), task="image-to-text-with-past", opset=17)
    session = ort.InferenceSession(str(tmp_path / "onnx" / "encoder_model.onnx"))
    x = np.random.default_rng(0).random((2, 1, *SHAPE), dtype=np.float32)
    (got,) = session.run(["last_hidden_state"], {"pixel_values": x})
    with torch.no_grad():
        want = model.encoder(torch.from_numpy(x)).last_hidden_state.numpy()
    assert np.abs(got - want).max() < 1e-4


def test_the_score_model_builds_with_the_conv_encoder_from_params(params):
    from sonfolio.score.model.model import build

    tok = train_bpe(["\\clef treble \\key c \\major c'4 d'4 e'4 f'4"] * 8, 300, 1, 64)
    cfg = params.score_train.model.model_copy(update={"encoder": "conv"})
    width = params.score_data.image_long_side
    model = build(cfg, tok, width)
    assert isinstance(model.encoder, ScoreConvModel)
    frames = model.encoder(torch.zeros(1, 1, cfg.image_height, width)).last_hidden_state
    assert frames.shape[1] == width // 2**cfg.conv.width_pools


def test_an_image_the_conv_blocks_cannot_halve_is_named(params):
    from sonfolio.score.model.model import build

    tok = train_bpe(["\\clef treble \\key c \\major c'4 d'4 e'4 f'4"] * 8, 300, 1, 64)
    cfg = params.score_train.model.model_copy(update={"encoder": "conv", "image_height": 100})
    with pytest.raises(ValueError, match="halves the height 5 times.*100 x 640"):
        build(cfg, tok, 640)


@pytest.mark.parametrize("encoder", ["conv", "vit"])
def test_attention_dropout_is_its_own_setting_and_null_follows_dropout(params, encoder):
    """attention_dropout 0 with dropout 0.1 (the default): the attention weights keep no
    dropout (CPU attention then takes the fused kernel), every other layer keeps its 0.1."""
    from sonfolio.score.model.model import build

    tok = train_bpe(["\\clef treble \\key c \\major c'4 d'4 e'4 f'4"] * 8, 300, 1, 64)
    cfg = params.score_train.model.model_copy(
        update={"encoder": encoder, "dropout": 0.1, "attention_dropout": 0.0}
    )
    model = build(cfg, tok, params.score_data.image_long_side)
    enc, dec = model.config.encoder, model.config.decoder
    assert (enc.attention_probs_dropout_prob, dec.attn_pdrop) == (0.0, 0.0)
    assert (enc.hidden_dropout_prob, dec.resid_pdrop, dec.embd_pdrop) == (0.1, 0.1, 0.1)
    follows = build(
        cfg.model_copy(update={"attention_dropout": None}), tok, params.score_data.image_long_side
    )
    assert follows.config.decoder.attn_pdrop == follows.config.encoder.hidden_dropout_prob == 0.1
