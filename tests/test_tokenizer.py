"""The BPE tokenizer: loads with transformers, and gives back every text exactly."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from sonfolio import tracks
from sonfolio.io import write_jsonl
from sonfolio.tokenizer import round_trip_failures, train_bpe
from tasks.tokenizer import run

SCORE = tracks.face("score", "tokenizer")

TEXTS = [
    r"\clef treble \key g \major \time 3/4 \partial 4 d'4 | g'4 a'4 b'4 | c''2.",
    r"\clef bass \key bes \major \time 4/4 <c e g>4 r2. | \tuplet 3/2 { c8 d8 e8 } f2.",
    r"\clef alto \key fis \minor \time 6/8 cis'8. d'16 e'8 fis'4.~ | fis'2.",
]


def test_round_trip_is_exact_even_for_text_never_seen():
    tok = train_bpe(TEXTS * 20, vocab_size=300, min_frequency=2, model_max_length=128)
    unseen = [r"\clef tenor \key ees \minor \time 12/8 beses,,32 <gisis''' aeses'''>1", "é à ’"]
    assert round_trip_failures(tok, TEXTS + unseen) == []
    ids = tok(TEXTS[0])["input_ids"]
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id


def test_stage_saves_a_tokenizer_transformers_loads(tmp_path, params):
    splits = ["train", "val", "test"] * 10
    rows = [{"text": t, "split": s} for t, s in zip(TEXTS * 10, splits, strict=True)]
    write_jsonl(tmp_path / "manifest.jsonl", rows)
    cfg = params.score_tokenizer.model_copy(update={"vocab_size": 300})
    stats = run(cfg, SCORE, tmp_path / "manifest.jsonl", tmp_path / "tok", tmp_path / "m.json")
    assert stats["round_trip_checked"] == 30 and stats["round_trip_failures"] == 0
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert loaded.decode(loaded(TEXTS[2])["input_ids"], skip_special_tokens=True) == TEXTS[2]
    assert loaded.pad_token == "<pad>"


def test_stage_refuses_a_manifest_without_train_split(tmp_path, params):
    write_jsonl(tmp_path / "manifest.jsonl", [{"text": TEXTS[0], "split": "test"}])
    with pytest.raises(ValueError, match="no train split"):
        run(
            params.score_tokenizer,
            SCORE,
            tmp_path / "manifest.jsonl",
            tmp_path / "t",
            tmp_path / "m",
        )
    assert not (tmp_path / "t").exists()
