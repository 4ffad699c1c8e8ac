"""music21 markings -> canonical format 3: articulations, dynamics, slurs, grace notes and bar
lines, on small scores built here and on real corpus tunes, each text checked by LilyPond."""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
from music21 import (
    articulations,
    bar,
    chord,
    clef,
    corpus,
    dynamics,
    expressions,
    key,
    meter,
    note,
    spanner,
    stream,
    tie,
)

from sonfolio.score.common.canonical import System, validate
from sonfolio.score.common.lilypond import Setting, compile_systems, find_lilypond
from sonfolio.score.data.convert import systems_from_score
from sonfolio.score.data.parse import abc_tune_score

HEAD = r"\clef treble \key c \major \time 4/4"
CONT = r"\clef treble \key c \major"  # a continuation system prints no time
WHOLE_PART = 100_000  # bars per system: a part as one text (what page data engraves)
# bar lines as written in a text
START, END, BOTH = r'\bar ".|:"', r'\bar ":|."', r'\bar ":..:"'
DOUBLE, FINAL = r'\bar "||"', r'\bar "|."'


def assert_clean(systems: list[System], workdir: Path) -> None:
    """Every text is canonical and LilyPond compiles it with no warning at all."""
    assert systems
    for s in systems:
        validate(s.text, s.time)
    texts = [s.text for s in systems]
    settings = [Setting(s.time, s.bar) for s in systems]
    result = compile_systems(texts, workdir, find_lilypond(), render=False, settings=settings)
    assert result.returncode == 0, result.log[-2000:]
    assert {t: w for t, w in zip(texts, result.warnings, strict=True) if w} == {}


def n(name: str, ql: float = 1.0, *marks, tie_type: str | None = None) -> note.Note:
    """A note with articulations and expressions (`marks`: instances)."""
    out = note.Note(name, quarterLength=ql)
    _mark(out, marks)
    if tie_type:
        out.tie = tie.Tie(tie_type)
    return out


def r(ql: float = 1.0, *marks) -> note.Rest:
    out = note.Rest(quarterLength=ql)
    _mark(out, marks)
    return out


def _mark(el: note.GeneralNote, marks) -> None:
    for m in marks:
        if isinstance(m, articulations.Articulation):
            el.articulations.append(m)
        else:
            el.expressions.append(m)


def grace(name: str, ql: float = 0.5, slash: bool = True) -> note.Note:
    g = note.Note(name, quarterLength=ql).getGrace()
    g.duration.slash = slash
    return g


def measure(*items, left=None, right=None) -> stream.Measure:
    m = stream.Measure()
    for item in items:
        if isinstance(item, tuple):  # (offset, element): a dynamic
            m.insert(item[0], item[1])
        else:
            m.append(item)
    if left is not None:
        m.leftBarline = left
    if right is not None:
        m.rightBarline = right
    return m


def part_of(measures: list[stream.Measure], *spanners: spanner.Spanner) -> stream.Part:
    for el in (clef.TrebleClef(), key.KeySignature(0), meter.TimeSignature("4/4")):
        measures[0].insert(0, el)
    p = stream.Part()
    for m in measures:
        p.append(m)
    for sp in spanners:
        p.insert(0, sp)
    return p


def convert(part: stream.Part, bars_per_system: int) -> tuple[list[System], Counter[str]]:
    return systems_from_score(stream.Score([part]), "x", bars_per_system)


# ---------------------------------------------------------------------------------------------
# Articulations, fermatas, trills


def test_articulations_fermatas_and_trills_follow_their_event(tmp_path: Path) -> None:
    accented = chord.Chord(["E4", "C4", "G4"], quarterLength=1)
    accented.articulations.append(articulations.Accent())
    trill_line_start = n("G5")
    part = part_of(
        [
            measure(
                accented,
                # written in the canonical order whatever music21's order
                n("C5", 1, articulations.Tenuto(), articulations.Staccato()),
                n("D5", 1, expressions.Fermata(), articulations.StrongAccent()),
                r(1, expressions.Fermata(), articulations.Staccato()),  # a rest: fermata only
            ),
            measure(
                n("E5", 2, expressions.Trill()),
                n("F5", 1, articulations.Staccatissimo(), expressions.Mordent()),
                trill_line_start,
            ),
            measure(n("A5", 4)),
        ],
        expressions.TrillExtension(trill_line_start),
    )
    systems, dropped = convert(part, 4)
    assert [s.text for s in systems] == [
        rf"{HEAD} <c' e' g'>4 -> c''4 -. -- d''4 -^ \fermata r4 \fermata | "
        r"e''2 \trill f''4 g''4 \trill | a''1"
    ]
    assert dropped == Counter(
        {
            "articulation_staccato_removed": 1,  # on the rest
            "articulation_staccatissimo_removed": 1,
            "expression_mordent_removed": 1,
        }
    )
    assert_clean(systems, tmp_path)


def test_a_split_note_carries_its_markings_on_its_first_piece(tmp_path: Path) -> None:
    # 5 quarters: no single value, so two tied notes (a whole tied to a quarter)
    part = part_of([measure(n("C5", 5, articulations.Accent(), expressions.Fermata()), n("D5", 3))])
    part.getElementsByClass(stream.Measure)[0].timeSignature = meter.TimeSignature("8/4")
    systems, _ = convert(part, 4)
    assert [s.text for s in systems] == [
        r"\clef treble \key c \major \time 8/4 c''1~ -> \fermata c''4 d''2."
    ]
    assert_clean(systems, tmp_path)


# ---------------------------------------------------------------------------------------------
# Dynamics


def test_dynamics_go_on_the_note_at_their_offset_or_the_next(tmp_path: Path) -> None:
    triplet = [n("C4", 1 / 3), n("D4", 1 / 3), n("E4", 1 / 3)]
    part = part_of(
        [
            measure(
                n("C4"),
                r(),
                n("D4"),
                n("E4"),
                (0.0, dynamics.Dynamic("p")),
                (1.0, dynamics.Dynamic("mf")),  # on a rest: the next note takes it
                (3.0, dynamics.Dynamic("sffz")),  # not in the grammar
            ),
            measure(*triplet, n("F4", 3), (Fraction(1, 3), dynamics.Dynamic("fp"))),
            measure(n("G4", 4), (2.0, dynamics.Dynamic("pp"))),  # after the bar's last note
            measure(n("A4", 4), (0.0, dynamics.Dynamic("sfz"))),
            # two before one note: the nearer one holds
            measure(r(2), n("B4", 2), (0.0, dynamics.Dynamic("p")), (1.0, dynamics.Dynamic("f"))),
        ]
    )
    systems, dropped = convert(part, 5)
    assert [s.text for s in systems] == [
        rf"{HEAD} c'4 \p r4 d'4 \mf e'4 | \tuplet 3/2 {{ c'8 d'8 \fp e'8 }} f'2. | g'1 | "
        r"a'1 \sfz | r2 b'2 \f"
    ]
    assert dropped == Counter(
        {"dynamic_sffz_removed": 1, "dynamic_without_note_removed": 1, "dynamic_extra_removed": 1}
    )
    assert_clean(systems, tmp_path)


# ---------------------------------------------------------------------------------------------
# Slurs


def test_slurs_one_at_a_time_within_a_system(tmp_path: Path) -> None:
    c4, d4, e4, f4 = n("C4"), n("D4"), n("E4"), n("F4")
    g4, a4, b4, c5 = n("G4"), n("A4"), n("B4"), n("C5")
    t1, t2, t3 = n("D5", 1 / 3), n("E5", 1 / 3), n("F5", 1 / 3)
    g5 = n("G5", 3)
    part = part_of(
        [measure(c4, d4, e4, f4), measure(g4, a4, b4, c5), measure(t1, t2, t3, g5)],
        spanner.Slur(c4, e4),
        spanner.Slur(e4, a4),  # starts where the one before ends: `) (`
        spanner.Slur(f4, b4),  # overlaps the one before: dropped
        spanner.Slur(d4, d4),  # nested, and on one note
        spanner.Slur(c5, t2),  # into the next system: dropped
        spanner.Slur(t1, g5),  # from inside a tuplet, across its brace
    )
    systems, dropped = convert(part, 2)
    assert [s.text for s in systems] == [
        rf"{HEAD} c'4 ( d'4 e'4 ) ( f'4 | g'4 a'4 ) b'4 c''4",
        rf"{CONT} \tuplet 3/2 {{ d''8 ( e''8 f''8 }} g''2. )",
    ]
    assert dropped == Counter(
        {
            "slur_overlap_removed": 1,
            "slur_single_event_removed": 1,
            "slur_across_systems_removed": 1,
        }
    )
    assert_clean(systems, tmp_path)
    # the whole part as one text (pages): the slur across the break stays, and the one from
    # inside the tuplet now overlaps it
    [whole], dropped = convert(part, WHOLE_PART)
    assert whole.text == (
        rf"{HEAD} c'4 ( d'4 e'4 ) ( f'4 | g'4 a'4 ) b'4 c''4 ( | "
        r"\tuplet 3/2 { d''8 e''8 ) f''8 } g''2."
    )
    assert_clean([whole], tmp_path / "whole")


def test_a_slur_ending_on_a_rest_is_dropped(tmp_path: Path) -> None:
    # music21 slurs may end on a rest (seen in the corpus); the grammar slurs notes and chords
    c4, d4, rest, f4 = n("C4"), n("D4"), note.Rest(quarterLength=1), n("F4")
    part = part_of([measure(c4, d4, rest, f4)], spanner.Slur(c4, rest), spanner.Slur(d4, f4))
    systems, dropped = convert(part, 2)
    assert [s.text for s in systems] == [rf"{HEAD} c'4 d'4 ( r4 f'4 )"]  # over a rest: fine
    assert dropped == Counter({"slur_on_rest_removed": 1})
    assert_clean(systems, tmp_path)


# ---------------------------------------------------------------------------------------------
# Grace notes


def test_grace_notes_group_before_the_note_they_ornament(tmp_path: Path) -> None:
    grace_chord = chord.Chord(["G5", "E5"], quarterLength=0.5).getGrace()
    part = part_of(
        [
            measure(
                grace("D5"),  # slashed: an acciaccatura
                n("C5", 1, articulations.Staccato()),
                grace("B4", 0.25, slash=False),
                grace("C5", 0.25, slash=False),
                n("D5", 3),
            ),
            measure(n("E5", 2, tie_type="start"), grace("F5"), n("E5", 2, tie_type="stop")),
            measure(grace_chord, n("F5", 4)),
        ]
    )
    systems, dropped = convert(part, 4)
    assert [s.text for s in systems] == [
        rf"{HEAD} \acciaccatura {{ d''8 }} c''4 -. \grace {{ b'16 c''16 }} d''2. | "
        # a tie passes over the grace note to the note it ornaments
        r"e''2~ \acciaccatura { f''8 } e''2 | \acciaccatura { <e'' g''>8 } f''1"
    ]
    assert dropped == Counter()
    assert_clean(systems, tmp_path)


def test_grace_notes_the_grammar_cannot_place_are_dropped_and_counted(tmp_path: Path) -> None:
    five = [grace(p, 0.25) for p in ("C5", "D5", "E5", "F5", "G5")]
    part = part_of(
        [
            measure(*five, n("A5", 4)),  # more than 4 in a row
            measure(grace("B4"), n("C5", 1 / 3), n("D5", 1 / 3), n("E5", 1 / 3), n("F5", 3)),
            measure(n("G5", 4), grace("A5")),  # after the bar's last note
            measure(grace("D5"), r(), n("C5", 3)),  # before a rest
        ]
    )
    systems, dropped = convert(part, 4)
    assert [s.text for s in systems] == [
        rf"{HEAD} a''1 | \tuplet 3/2 {{ c''8 d''8 e''8 }} f''2. | g''1 | r4 c''2."
    ]
    assert dropped == Counter({"grace_note_removed": 8})
    assert_clean(systems, tmp_path)


# ---------------------------------------------------------------------------------------------
# Bar lines


def repeat(direction: str) -> bar.Repeat:
    return bar.Repeat(direction=direction)


def bar_line_part() -> stream.Part:
    return part_of(
        [
            measure(n("C4", 4), left=repeat("start"), right=repeat("end")),
            measure(n("D4", 4), left=repeat("start"), right=bar.Barline("double")),
            measure(n("E4", 4), left=repeat("start"), right=bar.Barline("double")),
            measure(n("F4", 4), right=repeat("end")),
            measure(n("G4", 4), left=repeat("start"), right=bar.Barline("heavy-heavy")),
            measure(n("A4", 4), right=bar.Barline("final")),
        ]
    )


def test_bar_lines_between_bars_and_at_line_breaks(tmp_path: Path) -> None:
    systems, dropped = convert(bar_line_part(), 2)
    assert [s.text for s in systems] == [
        # a start repeat opens the piece; an end and a start repeat between two bars
        rf"{HEAD} {START} c'1 {BOTH} | d'1 {DOUBLE}",
        # the start repeat of the double bar at the break opens the next line, as printed
        rf"{CONT} {START} e'1 {DOUBLE} | f'1 {END}",
        # ":|." then ".|:" at a break; the heavy-heavy line has no token
        rf"{CONT} {START} g'1 | a'1 {FINAL}",
    ]
    assert dropped == Counter({"barline_heavy_heavy_removed": 1})
    assert_clean(systems, tmp_path)


def test_the_whole_part_text_carries_its_bar_lines(tmp_path: Path) -> None:
    [whole], _ = convert(bar_line_part(), WHOLE_PART)
    assert whole.text == (
        rf"{HEAD} {START} c'1 {BOTH} | d'1 {START} | e'1 {DOUBLE} | "
        rf"f'1 {BOTH} | g'1 | a'1 {FINAL}"
    )
    assert_clean([whole], tmp_path)


def test_a_start_repeat_with_a_pickup_and_an_empty_last_measure(tmp_path: Path) -> None:
    part = part_of(
        [
            measure(n("G4"), left=repeat("start")),
            measure(n("C5", 4)),
            measure(n("D5", 3)),
            measure(left=repeat("end")),  # an empty measure after the last bar: its line stays
        ]
    )
    systems, _ = convert(part, 4)
    assert [s.text for s in systems] == [rf"{HEAD} \partial 4 {START} g'4 | c''1 | d''2. {END}"]
    assert_clean(systems, tmp_path)


# ---------------------------------------------------------------------------------------------
# Real tunes


def _oneill(number: str) -> stream.Score:
    path = Path(corpus.getWork("oneills1850/0401-0486"))
    text = path.read_text(encoding="utf-8")
    starts = [m.start() for m in re.finditer(r"(?m)^X:", text)] + [len(text)]
    block = next(
        text[a:b] for a, b in zip(starts, starts[1:], strict=False) if text[a:].startswith(number)
    )
    return abc_tune_score(number, block)


@pytest.mark.slow
def test_an_abc_tune_with_repeats_and_slurs(tmp_path: Path) -> None:
    """O'Neill's 454, "The Black Haired Darling": `:| |:` between its two parts."""
    systems, dropped = systems_from_score(_oneill("X: 454"), "oneills/454", 4)
    assert [s.text for s in systems] == [
        r"\clef treble \key f \major \time 6/8 a'4 cis''8 d''4 e''8 | f''8. g''16 f''8 "
        r"f''16 e''8. d''8 | c''16 a'8. f''8 f''8. e''16 d''8 | c''16 a'8. d''8 d'4 d'16 ( e'16 )",
        # the second line is dropped (a short bar); the third opens with the start repeat
        rf"\clef treble \key f \major {START} d''8. d'16 d'8 d'4 e'8 | "
        r"f'8 g'8 a'8 a'8 c''8 b'8 | c''8. c'16 c'8 c'8 d'8 e'8 | f'8 g'8 a'8 a'8 d''8 cis''8",
        r"\clef treble \key f \major d''8. d'16 e'8 f'4 g'8 | a'8. g'16 a'8 f''4 d''8 | "
        r"c''16 ( a'8. f'8 ) g'16 ( a'8. g'8 ) | f'16 ( d'8. d'8 ) d'4 " + END,
    ]
    assert dropped == Counter({"incomplete_measure": 1})
    assert_clean(systems, tmp_path)


def test_abc_fermata_and_trill_decorations_are_kept(tmp_path: Path) -> None:
    """music21 drops the note under an ABC `H` (fermata) and the `T` (trill) of a note: the
    parser carries both through it. Text in quotes and `!...!` is left alone."""
    head = "X:1\nT:Tune\nM:3/4\nL:1/4\nK:G\n"
    score = abc_tune_score("t", head + '"^Hall"G TA !p!B | Hc Hz2 | d3 |]\n')
    systems, dropped = systems_from_score(score, "t", 4)
    assert [s.text for s in systems] == [
        r"\clef treble \key g \major \time 3/4 g'4 a'4 \trill b'4 | "
        r"c''4 \fermata r2 \fermata | d''2. " + FINAL
    ]
    assert dropped == Counter()
    assert_clean(systems, tmp_path)
    # a tune that uses music21's own `M` (tenuto) keeps it, and its `H` is not carried
    score = abc_tune_score("t", head + "MG A B | Hc z2 | d3 |]\n")
    systems, dropped = systems_from_score(score, "t", 4)
    assert [s.text for s in systems] == []
    assert dropped == Counter({"incomplete_measure": 1})
