"""Symbol error rate, character error rate, exact match and errors by kind, checked by hand."""

from __future__ import annotations

import pytest

from sonfolio.score.eval.metrics import compare, substitution_kinds, summarize

H = r"\clef treble \key c \major \time 4/4 "
REF = H + "c'4 d'4 e'4 f'4 | g'1"  # 3 header symbols + 4 notes + bar + 1 note = 9 symbols


def test_identity_is_zero_everywhere():
    m, scores = summarize([REF, REF], [REF, REF])
    assert m["ser"] == 0.0 and m["cer"] == 0.0 and m["exact_match"] == 1.0
    assert m["symbols"] == 18 and scores[0].ref_symbols == 9
    assert sum(m["errors_by_kind"].values()) == 0


def test_one_inserted_note_costs_one_symbol():
    m, _ = summarize([REF], [H + "c'4 d'4 e'4 f'4 | g'1 a'4"])
    assert m["insertions"] == 1 and m["substitutions"] == 0 and m["deletions"] == 0
    assert m["ser"] == pytest.approx(1 / 9)
    assert m["errors_by_kind"]["note"] == 1
    assert m["exact_match"] == 0.0


def test_one_deleted_barline_costs_one_symbol():
    m, _ = summarize([REF], [H + "c'4 d'4 e'4 f'4 g'1"])
    assert (m["deletions"], m["insertions"], m["substitutions"]) == (1, 0, 0)
    assert m["ser"] == pytest.approx(1 / 9)
    assert m["errors_by_kind"]["barline"] == 1


def test_a_header_command_is_one_symbol():
    """`\\key c \\major` -> `\\key g \\major` is one wrong symbol, not one of three words."""
    m, _ = summarize([REF], [REF.replace(r"\key c", r"\key g")])
    assert m["substitutions"] == 1 and m["ser"] == pytest.approx(1 / 9)
    assert m["errors_by_kind"]["command"] == 1


def test_cer_counts_characters():
    # "d'4" -> "e'4": one character of the reference's 45
    m, _ = summarize([REF], [REF.replace("d'4", "e'4")])
    assert m["cer"] == pytest.approx(1 / len(REF))


def test_empty_prediction_costs_every_symbol():
    m, scores = summarize([REF], [""])
    assert m["ser"] == 1.0 and m["cer"] == 1.0
    assert scores[0].deletions == 9


def test_empty_reference_is_documented():
    """An empty reference adds its prediction's symbols as insertions (corpus rate); when
    every reference is empty the rate is undefined and summarize says so."""
    m, scores = summarize([REF, ""], [REF, "c'4 d'4"])
    assert m["insertions"] == 2 and m["ser"] == pytest.approx(2 / 9)
    assert scores[1].ser == float("inf")
    assert compare("", "").ser == 0.0
    with pytest.raises(ValueError, match="every reference is empty"):
        summarize([""], ["c'4"])


@pytest.mark.parametrize(
    ("ref", "hyp", "kinds"),
    [
        ("c'4", "c''4", ["octave"]),  # same letter, another octave
        ("c'4", "d'4", ["pitch"]),  # another letter
        ("c'4", "b4", ["pitch"]),  # a step down across the octave mark: a pitch error
        ("c'4", "c'8", ["duration"]),
        ("c'4", "c'4.", ["duration"]),  # a dot is a duration
        ("fis'4", "f'4", ["accidental"]),
        ("fis'4", "f''4", ["accidental", "octave"]),
        ("c'4", "d'8", ["pitch", "duration"]),
        ("c'4", "c'4~", ["tie"]),
        ("c'4", "r4", ["rest"]),
        ("r4", "r8", ["duration"]),
        ("c'4", "|", ["barline"]),
        (r"\time 4/4", r"\time 3/4", ["command"]),
        ("<c'", "<d'", ["pitch"]),  # a chord's pitches are pitches too
        ("g'>4", "g'>2", ["duration"]),
        ("c'4", "#(system", ["other"]),
    ],
)
def test_substitution_kinds(ref, hyp, kinds):
    assert substitution_kinds(ref, hyp) == kinds


def test_errors_by_kind_from_the_alignment():
    """A wrong octave, a wrong pitch and a wrong duration in one system are told apart."""
    hyp = H + "c''4 e'4 e'8 f'4 | g'1"
    score = compare(REF, hyp)
    assert score.substitutions == 3 and score.errors == 3
    assert dict(score.kinds) == {"octave": 1, "pitch": 1, "duration": 1}


def test_inserted_and_deleted_symbols_by_kind():
    score = compare(REF, H + "c'4 d'4 e'4 | g'1 r4 |")
    assert score.deletions == 1 and score.insertions == 2
    assert score.kinds["note"] == 2 and score.kinds["barline"] == 1
