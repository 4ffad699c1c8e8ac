"""A tiny random Whisper saved as a hub checkpoint is: a hub-style generation config
(language, task, no-timestamps and suppressed tokens), for the ORT loop's tests.

Its ids are chosen where its greedy outputs land: unsuppressed, it starts with 89 and emits
48 and 101 often, so suppressing them changes its tokens; 4 (the end token) ends some
samples early.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sonfolio.config.params import load_params

ROOT = Path(__file__).resolve().parents[2]
START, EOS, PAD = 100, 4, 0
LANGS = {"<|en|>": 110, "<|fr|>": 111}
TASKS = {"translate": 112, "transcribe": 113}
NO_TIMESTAMPS = 114
SUPPRESS, BEGIN_SUPPRESS = [48, 101], [89, EOS]
PROMPT = [START, LANGS["<|fr|>"], TASKS["transcribe"], NO_TIMESTAMPS]


# The smallest Whisper shape the export tests use: 32 wide, 2 heads, one encoder layer, 80 mel
# bins over a 1 s window (50 encoder positions), 32 decoder positions. No suppressed tokens in
# the model config: Whisper's default begin_suppress_tokens are ids beyond a tiny vocabulary.
TINY = {
    "d_model": 32,
    "encoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "num_mel_bins": 80,
    "max_source_positions": 50,
    "max_target_positions": 32,
    "begin_suppress_tokens": None,
    "suppress_tokens": None,
}


def tiny_config(
    vocab_size: int, decoder_layers: int, start: int, bos: int, eos: int, pad: int
) -> object:
    """A WhisperConfig of the TINY shape with this vocabulary, depth and special ids."""
    from transformers import WhisperConfig

    ids = dict(decoder_start_token_id=start, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    return WhisperConfig(vocab_size=vocab_size, decoder_layers=decoder_layers, **ids, **TINY)


def build(folder: Path) -> Path:
    """A 2-decoder-layer random Whisper (1 s window) saved in `folder`."""
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    # the pad's embedding row is zero: never the end token
    config = tiny_config(120, 2, start=START, bos=EOS, eos=EOS, pad=PAD)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    with torch.no_grad():  # strong cross-attention: outputs that depend on the input
        for name, p in model.named_parameters():
            if "encoder_attn" in name and p.dim() == 2:
                p.normal_(0.0, 0.3)
    gen = model.generation_config
    gen.lang_to_id, gen.task_to_id, gen.no_timestamps_token_id = LANGS, TASKS, NO_TIMESTAMPS
    gen.is_multilingual, gen.language, gen.task = True, "fr", "transcribe"
    gen.suppress_tokens, gen.begin_suppress_tokens = SUPPRESS, BEGIN_SUPPRESS
    # a hub checkpoint's own config, not one derived from config.json (which loading would
    # derive again, dropping the Whisper keys)
    gen._from_model_config = False
    model.save_pretrained(str(folder))
    WhisperFeatureExtractor(feature_size=80, chunk_length=1).save_pretrained(str(folder))
    return folder


def export(folder: Path, out: Path) -> Path:
    """Its FP32 ONNX export into `out`, as the export stage writes it (encoder + merged
    decoder)."""
    from sonfolio.export.fp32 import export_fp32
    from sonfolio.tracks import face

    cfg = load_params(ROOT / "params.yaml").export
    export_fp32(folder, out, face("speech", "export").export_task, cfg)
    return out
