"""WER and CER through `evaluate` with the local metric modules (offline), checked by hand,
after the track's normalisation."""

from __future__ import annotations

import pytest

from sonfolio.speech.common.normalize import normalize
from sonfolio.speech.eval import metrics
from sonfolio.speech.eval.evaluate import utterance_wer


@pytest.fixture(scope="module")
def wer():
    return metrics.load("wer")


@pytest.fixture(scope="module")
def cer():
    return metrics.load("cer")


def test_modules_load_offline_from_the_package(wer, cer):
    # conftest sets HF_HUB_OFFLINE: a hub metric ("wer") could not load here
    assert type(wer).__name__ == "Wer" and type(cer).__name__ == "Cer"
    with pytest.raises(ValueError, match="unknown speech metric"):
        metrics.load("bleu")


def test_identity_is_zero(wer, cer):
    refs = ["le chat dort", "il pleut"]
    assert wer.compute(predictions=refs, references=refs)["wer"] == 0.0
    assert cer.compute(predictions=refs, references=refs)["cer"] == 0.0


def test_one_insertion(wer, cer):
    out = wer.compute(predictions=["le gros chat dort"], references=["le chat dort"])
    assert (out["insertions"], out["deletions"], out["substitutions"]) == (1, 0, 0)
    assert out["wer"] == pytest.approx(1 / 3)
    # "le chat dort" has 12 characters; "le chats dort" inserts one
    c = cer.compute(predictions=["le chats dort"], references=["le chat dort"])
    assert c["cer"] == pytest.approx(1 / 12) and c["insertions"] == 1


def test_one_deletion(wer, cer):
    out = wer.compute(predictions=["le dort"], references=["le chat dort"])
    assert out["deletions"] == 1 and out["wer"] == pytest.approx(1 / 3)
    c = cer.compute(predictions=["le chat dor"], references=["le chat dort"])
    assert c["deletions"] == 1 and c["cer"] == pytest.approx(1 / 12)


def test_corpus_rate_is_pooled_not_averaged(wer):
    # 1 error over 1 word and 0 over 3: pooled 1/4, not the mean of 1.0 and 0.0
    out = wer.compute(predictions=["x", "a b c"], references=["y", "a b c"])
    assert out["wer"] == pytest.approx(1 / 4)


def test_empty_hypothesis_costs_every_reference_word(wer, cer):
    assert wer.compute(predictions=[""], references=["le chat dort"])["wer"] == 1.0
    assert cer.compute(predictions=[""], references=["le chat"])["cer"] == 1.0


def test_empty_reference_is_documented(wer, cer):
    """An empty reference adds its hypothesis words as insertions and no reference words; all
    references empty: undefined, a ValueError."""
    out = wer.compute(predictions=["a b", "x y"], references=["a b", ""])
    assert out["insertions"] == 2 and out["wer"] == pytest.approx(2 / 2)
    with pytest.raises(ValueError, match="every reference is empty"):
        wer.compute(predictions=["a"], references=[""])
    with pytest.raises(ValueError, match="every reference is empty"):
        cer.compute(predictions=["a"], references=[" "])


def test_normalisation_makes_case_punctuation_and_digits_free(wer):
    ref = normalize("Le 3 mars, l'école ouvre à 8 h 30.")
    hyp = normalize("le trois mars L'école ouvre à huit heures trente")
    assert ref == hyp == "le trois mars l'école ouvre à huit heures trente"
    assert wer.compute(predictions=[hyp], references=[ref])["wer"] == 0.0
    # accents are kept: "a" for "à" is an error
    assert wer.compute(predictions=[normalize("Il a Paris")], references=[normalize("Il à Paris")])[
        "wer"
    ] == pytest.approx(1 / 3)


def test_utterance_wer_ranks_worst_examples():
    assert utterance_wer("a b c", "a b c") == 0.0
    assert utterance_wer("a b", "a x y z") == pytest.approx(3 / 2)  # 1 sub + 2 ins
    assert utterance_wer("", "") == 0.0 and utterance_wer("", "a") == 1.0
