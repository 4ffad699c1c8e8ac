"""A model folder read without transformers (sonfolio.model_folder): the tokenizer decodes as
transformers' own does, the config reads as attributes, and nothing heavy is imported."""

from __future__ import annotations

import importlib.resources
import random
import subprocess
import sys

import pytest
from whisper_tiny import PACKAGE, needs_tokenizer  # tests/ is on sys.path

from sonfolio.model_folder import FolderError, FolderTokenizer, read_config
from sonfolio.tokenizer import train_bpe

TEXTS = [
    r"\clef treble \key g \major \time 3/4 \partial 4 d'4 | g'4 a'4 b'4 | c''2.",
    r"\clef bass \key bes \major \time 4/4 <c e g>4 r2. | \tuplet 3/2 { c8 d8 e8 } f2.",
]


def _same_decoding(hf, ours, extra: list[int], rounds: int) -> None:
    """Random id rows (special tokens and Whisper's prompt and timestamps among them), both
    with and without skip_special_tokens, decode alike."""
    rng = random.Random(0)
    for _ in range(rounds):
        ids = [rng.randrange(len(hf)) for _ in range(rng.randrange(0, 25))]
        if rng.random() < 0.5:
            ids = [rng.choice(extra), *ids]
        if rng.random() < 0.3:
            ids = [*ids, rng.choice(extra), *ids]
        for skip in (True, False):
            assert ours.decode(ids, skip) == hf.decode(ids, skip_special_tokens=skip), ids
    assert ours.batch_decode([extra[:3], []], True) == hf.batch_decode([extra[:3], []], True)


def test_a_score_tokenizer_decodes_as_transformers_does(tmp_path):
    from transformers import AutoTokenizer

    train_bpe(TEXTS * 20, 300, 2, 128).save_pretrained(tmp_path)
    hf, ours = AutoTokenizer.from_pretrained(tmp_path), FolderTokenizer(tmp_path)
    assert len(ours) == len(hf)
    assert ours.all_special_ids == sorted(hf.all_special_ids)
    assert (ours.eos_token_id, ours.pad_token_id) == (hf.eos_token_id, hf.pad_token_id)
    assert ours(TEXTS[1], add_special_tokens=False) == {
        "input_ids": hf(TEXTS[1], add_special_tokens=False)["input_ids"]
    }
    _same_decoding(hf, ours, sorted(hf.all_special_ids), 300)


@needs_tokenizer
def test_whispers_tokenizer_decodes_as_transformers_does(tmp_path):
    # transformers' Whisper decode strips a <|startofprev|> prompt and <|1.24|> timestamps
    from transformers import WhisperTokenizerFast

    hf = WhisperTokenizerFast(
        tokenizer_file=str(importlib.resources.files(PACKAGE) / "data" / "tokenizer.json")
    )
    hf.save_pretrained(tmp_path)
    hf = WhisperTokenizerFast.from_pretrained(tmp_path)
    ours = FolderTokenizer(tmp_path)
    ids = hf.convert_tokens_to_ids
    prompt = ["<|startofprev|>", "<|startoftranscript|>", "<|fr|>", "<|notimestamps|>"]
    extra = [*map(ids, prompt), ids("<|0.00|>"), ids("<|1.24|>"), hf.eos_token_id]
    assert len(ours) == len(hf)
    assert (ours.eos_token_id, ours.pad_token_id) == (hf.eos_token_id, hf.pad_token_id)
    text = "Bonjour, ça va ? C'est l'été."
    assert ours(text, False)["input_ids"] == hf(text, add_special_tokens=False)["input_ids"]
    _same_decoding(hf, ours, extra, 40)  # transformers' Whisper decode takes ~0.1 s a row


def test_the_config_reads_as_attributes_and_a_missing_file_is_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "x", "decoder": {"n_positions": 7}}')
    config = read_config(tmp_path)
    assert (config.model_type, config.decoder.n_positions) == ("x", 7)
    assert getattr(config, "ctc_decoding", False) is False
    with pytest.raises(FolderError, match="tokenizer.json is missing"):
        FolderTokenizer(tmp_path)
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(FolderError, match="config.json holds no JSON object"):
        read_config(tmp_path)


def test_reading_a_folder_imports_neither_torch_nor_transformers(tmp_path):
    train_bpe(TEXTS * 20, 300, 2, 128).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "x"}')
    code = (
        "import sys; from sonfolio.model_folder import FolderTokenizer, read_config; "
        f"t = FolderTokenizer({str(tmp_path)!r}); read_config({str(tmp_path)!r}); "
        "print(t.decode(t('c8 d8')['input_ids'], True)); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-2:] == ["c8 d8", "[]"]
