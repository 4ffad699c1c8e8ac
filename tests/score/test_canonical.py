"""The canonical grammar: what it accepts compiles cleanly, what it rejects is named precisely."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from sonfolio.score.common.canonical import (
    CanonicalError,
    header_time,
    is_canonical,
    time_after,
    validate,
)
from sonfolio.score.common.lexicon import (
    CLEFS,
    DURATIONS,
    KEYS,
    duration_token,
    partial_token,
    symbols,
)
from sonfolio.score.common.lilypond import Setting, compile_systems, find_lilypond

H = r"\clef treble \key c \major \time 4/4"

GOOD = [
    rf"{H} c'4 d'4 e'4 f'4 | g'1",
    rf"{H} \partial 4 g4 | c'4~ c'8 r8 <c' e' g'>2 | \tuplet 3/2 {{ c'8 d'8 e'8 }} r4 r2",
    rf"{H} c'2 \clef bass c4 c4 | \key f \major \time 3/4 a,2.",
    rf"{H} \partial 16*5 cis''16 bes'4 | cisis'1",
    rf"{H} <c' e' g'>4~ <c' g'>4 r2 | c'1",
    rf"{H} c'4 c'4 c'4",  # a short last bar: the end of a piece
    r'\clef "treble_8" \key ces \major \time 6/8 <c e>4.~ <c g>4. | c8',
    r"\clef bass \key cis \major \time 2/4 \partial 4*1/3 \tuplet 3/2 { c8 } | c4 c4",
    r"\clef alto \key c \major \time 3/8 \tuplet 2/3 { c'8 d'8 } | c'8.. d'64 e'8",
    rf"{H} c'1 | \time 2/2 c'1",  # same length, a different signature
]


@pytest.mark.parametrize("text", GOOD)
def test_accepts_canonical_texts(text: str) -> None:
    validate(text)
    assert is_canonical(text)


def test_what_it_accepts_compiles_without_warnings(tmp_path: Path) -> None:
    # Every clef and key signature too: the constants must be names LilyPond knows.
    texts = GOOD + [rf"\clef {c} \key c \major \time 4/4 c'1" for c in CLEFS]
    texts += [rf"\clef treble \key {t} \{m} \time 4/4 c'1" for t, m in KEYS]
    for t in texts:
        validate(t)
    result = compile_systems(texts, tmp_path, find_lilypond(), render=False)
    assert result.returncode == 0, result.log[-2000:]
    assert result.warnings == [[] for _ in texts]


# (the text with its offending token between « and », words the reason must contain);
# «<end>» ends a text that stops too early
BAD = [
    (rf'{H} «#(system» "rm -rf /")', "'#' is not allowed"),
    (rf"{H} «$(ly:gulp-file» x)", "'$' is not allowed"),
    (rf'{H} «\include» "x.ly"', "command not allowed"),
    (rf"{H} «\relative» c' {{ c4 }}", "command not allowed"),
    (rf"{H} «\override» Staff.X = 1", "command not allowed"),
    (rf"{H} «{{» c'1", "braces only delimit a \\tuplet"),
    (rf"{H} c'1 «}}»", "braces only delimit"),
    (rf"{H} «<c'» e'4 r2.", "unclosed chord"),
    (rf"{H} c'2 «e'>2»", "without an opening '<'"),
    (rf"{H} «<e'» c'>1", "ascending"),
    (rf"{H} «<c'>1»", "two pitches"),
    (rf"{H} c'4 d'4 e'4 «|» f'1", "bar 1 lasts 3/4, the measure is 1"),
    (rf"{H} c'1 | d'1 e'4«<end>»", "longer than the measure"),
    (rf"{H} \partial 4 c'2 «|» c'1", "bar 1 lasts 1/2, the measure is 1/4"),
    (rf"{H} \partial «16*4» c'4 | c'1", "write it as 4"),
    (rf"{H} \partial «1» c'1 | c'1", "shorter than the measure"),
    (rf"{H} \partial «64.*3» c'1 | c'1", "shorter than 1/64"),
    (rf"{H} c'1 «|»", "no trailing"),
    (rf"{H} c'1 «» | c'1", "exactly one space"),
    (rf"{H} c'4~ «d'4» r2", "shares no pitch"),
    (rf"{H} c'1~«<end>»", "tied to nothing"),
    (rf"{H} c'2 «\time» 2/4 c'2", "only at the start of a bar"),
    (rf"{H} c'1 | \time 3/4 «\key» d \major c'2.", "in the order"),
    (rf"{H} c'1 | «\clef» treble c'1", "restates"),
    (rf"{H} c'2 c'2 \clef bass «|» c1", "after the bar check"),
    (rf"{H} \tuplet 3/2 {{ c'8 «\tuplet» 3/2 {{ c'8 }} }} r2.", "no nesting"),
    (rf"{H} \tuplet «3/3» {{ c'4 }} r2.", "N != M"),
    (rf"{H} \tuplet «3/40» {{ c'4 }} r2.", "up to 32"),
    (rf"{H} \tuplet 3/2 {{ c'8 d'8 e'8 «|» }} r2.", "only notes, rests and chords"),
    (rf"{H} «es'1»", "not a note"),  # Dutch e-flat is written ees
    (rf"{H} «c'3»", "not a note"),
    (rf"{H} c'1 | «\partial» 4 c'4", "not allowed here"),
    (r"\clef treble \key g «\minor» \time 4/4 c'1", "G minor is \\key bes"),
    (r"\clef treble \key «gis» \major \time 4/4 c'1", "at most 7 sharps or flats"),
    (r"\clef treble \key c \major «\partial» 4 c'4 | c'1", "opens a piece"),
    (r"\clef «violin» \key c \major \time 4/4 c'1", "unknown clef"),
    (r"\clef treble \key c \major \time «4/3» c'1", "time signature must be"),
    (r"\clef treble «\time» 4/4 c'1", r"expected '\\key'"),
]


def _case(marked: str) -> tuple[str, str, int, int]:
    """A rejected text written with its offending token between « and »: (the text, the token,
    its index among the text's space-separated tokens, the character it starts at)."""
    before, rest = marked.split("«")
    token, after = rest.split("»")
    if token == "<end>":  # the error points past the last token
        return before, token, before.count(" ") + 1, len(before)
    return before + token + after, token, before.count(" "), len(before)


@pytest.mark.parametrize("text", ["", " ", "\n", H, f"{H} c'1\n| c'1", f"{H}\tc'1"])
def test_rejects_empty_and_foreign_whitespace(text: str) -> None:
    assert not is_canonical(text)


def test_bar_check_agrees_with_lilypond(tmp_path: Path) -> None:
    """Texts rejected for their bar arithmetic are exactly those LilyPond warns about."""
    wrong = [
        rf"{H} c'4 d'4 e'4 | f'1",
        rf"{H} \partial 4 c'2 | c'1",
        rf"{H} \tuplet 3/2 {{ c'4 c'4 }} r2 | c'1",
        rf"{H} c'4~ d'4 r2 | c'1",
    ]
    right = [
        rf"{H} \tuplet 3/2 {{ c'4 c'4 c'4 }} r2 | c'1",
        rf"{H} \partial 8. c'16 c'8 | c'1",
    ]
    assert not any(is_canonical(t) for t in wrong)
    assert all(is_canonical(t) for t in right)
    result = compile_systems(wrong + right, tmp_path, find_lilypond(), render=False)
    assert result.returncode == 0
    assert [bool(w) for w in result.warnings] == [True] * len(wrong) + [False] * len(right)


def test_symbols_join_commands_and_split_chords() -> None:
    text = rf"{H} \partial 8 <c' e'>8~ | \tuplet 3/2 {{ <c' g'>8 d'8 e'8 }} r4 r2"
    assert symbols(text) == [
        r"\clef treble",
        r"\key c \major",
        r"\time 4/4",
        r"\partial 8",
        "<c'",
        "e'>8~",
        "|",
        r"\tuplet 3/2 {",
        "<c'",
        "g'>8",
        "d'8",
        "e'8",
        "}",
        "r4",
        "r2",
    ]
    # Model output need not be canonical: symbols still splits it, never raises.
    assert symbols(r"c'4 \key d") == ["c'4", r"\key d"]
    assert symbols("  c'4   d'4 ") == ["c'4", "d'4"]


def test_constants_cover_the_grammar() -> None:
    # a key by its signature (format 2): the 15 signatures, each as its major key
    assert len(KEYS) == 15 and len(set(KEYS)) == 15
    assert {m for _, m in KEYS} == {"major"}
    assert "4." in DURATIONS and "64.." in DURATIONS and "128" not in DURATIONS


@pytest.mark.parametrize(
    ("length", "token"),
    [
        (Fraction(1, 4), "4"),
        (Fraction(3, 8), "4."),
        (Fraction(5, 16), "16*5"),
        (Fraction(1, 12), "4*1/3"),
        (Fraction(7, 32), "8.."),
    ],
)
def test_partial_token(length: Fraction, token: str) -> None:
    assert partial_token(length) == token
    assert duration_token(length) == (token if "*" not in token else None)


# A continuation system prints no time signature: it is read in the time in force before it.
CONTINUED = r"\clef treble \key g \major g'2. | a'4 b'4 c''4 | d''2"


def test_a_continuation_system_is_checked_against_the_time_in_force() -> None:
    validate(CONTINUED, "3/4")
    assert header_time(CONTINUED) is None and time_after(CONTINUED, "3/4") == "3/4"
    with pytest.raises(CanonicalError, match="bar 1 lasts 3/4, the measure is 1/2"):
        validate(CONTINUED, "2/4")
    # unknown time: the first full bar sets the measure, and every later full bar must match
    validate(CONTINUED)
    assert time_after(CONTINUED) is None
    with pytest.raises(CanonicalError, match="bar 2 lasts 1/2, the measure is 3/4"):
        validate(r"\clef treble \key g \major g'2. | a'4 b'4 | c''2")
    # a printed time signature wins over the one in force, and is carried on
    printed = r"\clef treble \key g \major \time 2/4 g'2 | a'4 b'4"
    validate(printed, "3/4")
    assert header_time(printed) == "2/4" and time_after(printed, "3/4") == "2/4"
    with pytest.raises(ValueError, match="not a time signature"):
        validate(CONTINUED, "3/5")


def test_a_continuation_system_compiles_cleanly_with_its_setting(tmp_path: Path) -> None:
    """What the render draws for a continuation system: no time signature, its bar number, and
    no bar-check warning because LilyPond is told the time in force."""
    texts = [CONTINUED, CONTINUED]
    settings = [Setting("3/4", 9), Setting("2/4", 9)]
    result = compile_systems(texts, tmp_path, find_lilypond(), render=False, settings=settings)
    assert result.returncode == 0, result.log[-2000:]
    assert result.warnings[0] == []
    assert any("bar check failed" in w for w in result.warnings[1])


def test_a_setting_never_carries_text_to_lilypond() -> None:
    assert Setting("3/4", 5).prefix() == (
        r"\set Score.currentBarNumber = #5 \once \omit Staff.TimeSignature \time 3/4 "
    )
    assert Setting().prefix() == Setting(None, 1).prefix() == ""
    with pytest.raises(ValueError, match="not a time signature"):
        Setting('3/4 #(system "x")').prefix()


# Format 3: markings, grace notes and bar lines (docs/canonical-lilypond.md, "Markings").
MARKED = [
    rf"{H} c'4 -. \p ( d'4 e'4 -- f'4 ) | g'1 \fermata",
    rf"{H} c'4 ( d'4 ) ( e'4 f'4 ) | g'1",
    rf"{H} c'4 ( d'4 e'4 f'4 | g'1 )",  # a slur crosses the bar line
    rf"{H} \acciaccatura {{ d''8 }} c''4 -. \grace {{ b'16 c''16 }} d''2 r4 \fermata | c'1",
    rf'''{H} c'2 d'2 \bar ":|." | e'1 \bar "|."''',
    rf'''{H} \bar ".|:" c'1 \bar ":..:" | d'1 \bar ":|."''',
    rf'''{H} c'1 \bar "||" | d'1 \bar "||"''',
    rf"{H} \tuplet 3/2 {{ c'8 ( d'8 e'8 ) }} f'4 -> \ff g'2 | <c' e'>1 -^ \trill",
    rf"{H} c'4~ -. ( c'4 \grace {{ d'16 }} e'2 ) | f'1 \sfz",
    rf"{H} c'4~ \grace {{ <d' f'>16 }} c'4 e'2 \mf | f'1 \pp",  # a tie crosses the grace group
    r"""\clef treble \key c \major \time 3/4 \partial 4 \bar ".|:" g'4 -- \ppp | c'2. \fp""",
    rf"{H} c'4 -. -- -> -^ \fermata \trill \fff ( d'2. ) | e'1",  # every kind, in order
    rf"{H} c'4 \sf d'4 \sfp e'4 \fz f'4 \rfz | g'1",
]

MARKED_BAD = [
    (rf"{H} c'4 \p «-.» d'4 e'2 | f'1", "in the order"),
    (rf"{H} c'4 ( d'4 e'2 | f'1«<end>»", "slur is still open"),
    (rf"{H} c'4 «)» d'4 e'2 | f'1", "begun on an earlier note"),
    (rf"{H} c'4 ( «(» d'4 e'2 ) | f'1", "in the order"),
    (rf"{H} r4 «-.» c'4 d'2 | e'1", "a rest takes only"),
    (rf"{H} c'2 \p «\f» d'2 | e'1", "in the order"),
    (rf"{H} «-.» c'1", "follows the note, rest or chord"),
    (rf"{H} \grace {{ d'16 }} «r4» c'4 d'2 | e'1", "followed by the note or chord"),
    (rf"{H} c'4 d'4 e'2 \grace {{ d'16 }} «|» e'1", "followed by the note or chord"),
    (rf"{H} \grace {{ «d'16~» }} d'4 e'2. | f'1", "not tied"),
    (rf"{H} \grace {{ «r16» }} d'4 e'2. | f'1", "only notes and chords"),
    (rf"{H} \grace {{ c'16 d'16 e'16 f'16 «g'16» }} d'4 | f'1", "at most 4"),
    (rf"{H} \tuplet 3/2 {{ c'8 «\grace» {{ d'16 }} d'8 e'8 }} f'4 g'2", "tuplet"),
    (rf"""{H} c'4 d'4 e'2 | «\bar» "||" e'1""", "right before '|'"),
    (rf"""{H} c'1 \bar «".|:"»""", "a line ends only with"),
    (rf"""{H} \bar «":|."» c'1""", "opens only with a start repeat"),
    (rf"""{H} c'1 \bar "||" «\bar» "|." | d'1""", "followed by '|'"),
    (rf"""{H} c'4 \bar «"x"» | d'1""", "unknown bar line"),
]


@pytest.mark.parametrize("text", MARKED)
def test_accepts_markings_graces_and_bar_lines(text: str) -> None:
    validate(text)


@pytest.mark.parametrize(("marked", "why"), BAD + MARKED_BAD)
def test_rejects_and_names_the_offending_token(marked: str, why: str) -> None:
    text, token, index, char = _case(marked)
    with pytest.raises(CanonicalError) as info:
        validate(text)
    err = info.value
    assert (err.token, err.index, err.char) == (token, index, char), str(err)
    assert why in err.why
    assert f"token {index} {token!r}" in str(err)
    assert not is_canonical(text)


def test_markings_compile_without_warnings(tmp_path: Path) -> None:
    result = compile_systems(MARKED, tmp_path, find_lilypond(), render=False)
    assert result.returncode == 0, result.log[-2000:]
    assert result.warnings == [[] for _ in MARKED]


def test_symbols_keep_a_bar_line_and_a_grace_opening_whole() -> None:
    assert symbols(rf'''{H} \grace {{ b'16 }} c'4 -. \p ( d'2 ) \bar "||"''')[3:] == [
        r"\grace {",
        "b'16",
        "}",
        "c'4",
        "-.",
        r"\p",
        "(",
        "d'2",
        ")",
        r'\bar "||"',
    ]
