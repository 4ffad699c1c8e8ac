"""benchmarks/pages.py's logic that could go wrong without a sound: the true systems of each
page from LilyPond's layout report (checked against the staves the page cutter finds on a real
2-page engraving), the notes read from a text, and the note error rates."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks.pages import against, engrave, music21_notes
from sonfolio.config.params import load_params
from sonfolio.score.common.canonical import validate
from sonfolio.score.common.lilypond import find_lilypond
from sonfolio.score.common.page import find_staves
from sonfolio.score.common.pages import Layout, document
from sonfolio.score.data.convert import systems_from_score
from sonfolio.score.data.parse import abc_tune_score
from sonfolio.score.eval.page_eval import (
    Note,
    baseline_distance,
    compare,
    edit_rate,
    notes_of,
    page_truth,
    summarize,
)

RUN = "c''16 b'16 a'16 g'16 f'16 e'16 d'16 c'16 d'16 e'16 f'16 g'16 a'16 b'16 c''16 d''16"


def test_each_pages_systems_come_from_lilypond_and_match_the_staves_printed(tmp_path):
    bars = 60  # dense 16ths: three or four bars a system, more than one A4 page
    text = "\\clef treble \\key c \\major \\time 4/4 " + " | ".join([RUN] * bars)
    validate(text)
    pages = engrave(text, 'A "test" \\piece #', tmp_path, find_lilypond(), 100, "a4")
    assert len(pages) >= 2
    spans = [s for p in pages for s in p.systems]
    assert spans[0][0] == 0 and spans[-1][1] == bars  # whole notes: one a 4/4 bar
    assert all(
        a[1] == b[0] and b[0].denominator == 1 for a, b in zip(spans, spans[1:], strict=False)
    )
    cfg = load_params().infer.score.page
    for page in pages:  # an independent count: the staves drawn on the PNG of that page
        gray = np.asarray(Image.open(page.png).convert("L"))
        assert len(find_staves(gray, cfg)) == len(page.systems)
    notes, end = notes_of(text)
    assert end == bars and len(notes) == 16 * bars
    parts = [page_truth(notes, p) for p in pages]
    assert sum(parts, []) == notes  # every note on exactly one page, in order
    assert parts[1][0].onset == pages[1].systems[0][0]


def test_title_cannot_reach_lilypond_as_code():
    layout = Layout("a4", 20, 'A "b" \\c #(d) $e', "J.S. #(system)")
    ly = document("\\clef treble \\key c \\major \\time 4/4 c'1", layout)
    header = next(line for line in ly.splitlines() if line.startswith("\\header"))
    assert header == '\\header { title = "A b c (d) e" composer = "J.S. (system)" }'


def read_canonical(text: str) -> tuple[list[tuple[str, Fraction]], list[Fraction], Fraction]:
    """notes_of on a text the grammar accepts: each note's (pitch, length in quarter notes), the
    notes' onsets and the text's end (in whole notes)."""
    validate(text)
    notes, end = notes_of(text)
    return [(n.pitch, n.length) for n in notes], [n.onset for n in notes], end


def test_notes_of_reads_chords_tuplets_rests_and_pickups():
    notes, onsets, end = read_canonical(
        "\\clef treble \\key d \\major \\time 2/4 \\partial 8 a'8 | <d' fis'>4 r8 "
        "\\tuplet 3/2 { b'16 cis''16 d''16 } | bes,4.. eeses'''16"
    )
    third = Fraction(1, 6)  # a 16th in a triplet, in quarter notes
    assert notes == [
        ("A4", Fraction(1, 2)),
        ("D4", 1),
        ("F#4", 1),
        ("B4", third),
        ("C#5", third),
        ("D5", third),
        ("B-2", Fraction(7, 4)),
        ("E--6", Fraction(1, 4)),
    ]
    assert onsets[:4] == [0, Fraction(1, 8), Fraction(1, 8), Fraction(1, 2)]
    assert end == Fraction(1, 8) + 2 * Fraction(1, 2)


def test_notes_of_keeps_what_a_broken_prediction_spells():
    notes, _ = notes_of("\\clef treble \\key g foo a'4 | <c' e'>8 zz c'' g'>4 | \\time")
    assert [(n.pitch, n.length) for n in notes] == [
        ("A4", 1),
        ("C4", Fraction(1, 2)),
        ("E4", Fraction(1, 2)),
    ]


def test_notes_of_skips_markings_bar_lines_and_grace_groups():
    notes, onsets, end = read_canonical(
        '\\clef treble \\key c \\major \\time 2/4 \\bar ".|:" c\'4 -. \\p ( '
        "\\acciaccatura { d''8 } e'4 ) | \\grace { b'16 <c'' e''>16 } d''4 -- \\fermata "
        "\\tuplet 3/2 { e''8 -> f''8 g''8 } \\bar \":|.\" | r2 \\fermata \\bar \"|.\""
    )
    third = Fraction(1, 3)  # an 8th in a triplet, in quarter notes
    assert notes == [
        ("C4", 1),
        ("E4", 1),
        ("D5", 1),
        ("E5", third),
        ("F5", third),
        ("G5", third),
    ]
    assert onsets[:3] == [0, Fraction(1, 4), Fraction(1, 2)]
    assert end == Fraction(3, 2)
    # a broken grace group ends at the first token that cannot stand in one; without braces
    # it is the one event after the command
    notes, _ = notes_of("\\clef treble \\key c \\major \\grace { d'16 | e'4 \\grace c'8 f'4")
    assert [n.pitch for n in notes] == ["E4", "F4"]


def test_truth_notes_agree_with_music21():
    score = abc_tune_score("t", "X:1\nT:t\nM:6/8\nL:1/8\nK:G\n(3B/c/d/|g2e dBG|[DA]3 z2 F|G6|]\n")
    (system,), _ = systems_from_score(score, "t", 100_000)
    notes, _ = notes_of(system.text)
    assert [(n.pitch, n.length) for n in notes] == music21_notes(score.parts[0])


def test_edit_rates_and_the_most_common_note_baseline():
    c, d, e = ("C4", 1), ("D4", 1), ("E4", 1)
    assert edit_rate([c, d, e], [c, e]) == (1, 3)
    assert edit_rate([c, d, e], [c, ("D4", 2), e, e]) == (2, 3)
    assert edit_rate(["C4", "D4", "E4"], ["C4", "D4", "E4", "E4"]) == (1, 3)
    assert baseline_distance([c, c, d, c]) == 1
    assert baseline_distance([]) == 0


def row(true: int, found: int, valid: int, notes: int, dist: int, piece: str = "a", page: int = 1):
    return {
        "piece": piece,
        "page": page,
        "true_systems": true,
        "found_systems": found,
        "valid_systems": valid,
        "truth_notes": notes,
        "predicted_notes": notes,
        "distance": dist,
        "distance_pitch": dist // 2,
        "baseline_distance": notes,
        "baseline_distance_pitch": notes,
    }


def test_summary_sums_over_pages():
    s = summarize([row(10, 10, 5, 100, 10, "a"), row(4, 3, 0, 300, 270, "b")])
    assert s["note_error_rate"] == pytest.approx(280 / 400)  # not the mean of 0.1 and 0.9
    assert s["note_error_rate_pitch"] == pytest.approx(140 / 400)
    assert s["valid_rate"] == pytest.approx(5 / 13, abs=1e-4)
    assert s["systems_found_ratio"]["overall"] == pytest.approx(13 / 14, abs=1e-4)
    assert s["systems_found_ratio"]["pages_within_0.95_1.05"] == 0.5
    assert s["baseline_most_common_note"]["note_error_rate"] == 1.0
    assert Note("C4", Fraction(1), Fraction(0)).pitch == "C4"
    assert s["pieces"] == 2
    low, high = s["note_error_rate_ci95"]
    assert low < 280 / 400 < high


def test_pages_of_one_piece_are_resampled_together():
    """Two pieces, one read well over ten pages and one badly over ten: resampled by piece the
    interval spans most of the way between them; resampling the 20 pages one by one would make
    it look twice as sure (the pages of one piece err together)."""
    rows = [row(3, 3, 3, 100, 5, "good", k) for k in range(10)]
    rows += [row(3, 3, 3, 100, 45, "bad", k) for k in range(10)]
    s = summarize(rows)
    low, high = s["note_error_rate_ci95"]
    assert s["note_error_rate"] == 0.25 and low <= 0.06 and high >= 0.44
    one_piece_a_page = summarize([{**r, "piece": f"{r['piece']}{r['page']}"} for r in rows])
    page_low, page_high = one_piece_a_page["note_error_rate_ci95"]
    assert page_high - page_low < (high - low) * 0.7


@pytest.mark.slow
def test_a_piece_is_read_in_every_engraving_asked_for(tmp_path):
    """run() on one held-out piece, LilyPond clean and Verovio's held-out font made scan-like,
    by an untrained tiny model: each engraving's figures on the same notes, LilyPond's on top."""
    import argparse

    from infer_tiny import score_model

    from benchmarks.pages import run
    from sonfolio.infer.run import load_model

    params = load_params()
    variant = load_model(score_model(tmp_path / "model"), "score", 1, "cpu")
    kinds = ["lilypond", "verovio:Leland+scan"]
    args = argparse.Namespace(pieces=1, seed=0, extra=[], dpi=100, paper="a4", engravings=kinds)
    result = run(args, params, variant, tmp_path / "work")
    assert len(result["pieces"]) == 1 and result["headline_engraving"] == "lilypond"
    by = result["by_engraving"]
    assert set(by) == set(kinds)
    assert by["lilypond"]["truth_notes"] == by["verovio:Leland+scan"]["truth_notes"] > 0
    assert result["note_error_rate"] == by["lilypond"]["note_error_rate"]
    assert {r["engraving"] for r in result["rows"]} == set(kinds)


def test_a_kept_sample_shows_the_page_as_straightened_when_the_reader_turned_it(tmp_path):
    """The boxes of a turned page lie in the turned image: the sample is drawn on it (a box
    drawn on the crooked original would sit beside its staff)."""
    from sonfolio.score.common.page import Box, turned_size
    from sonfolio.score.decode.read import Reading, SystemText
    from sonfolio.score.eval.page_eval import SAMPLE_WIDTH, keep_sample

    png = tmp_path / "page.png"
    Image.fromarray(np.full((1200, 900), 255, np.uint8)).save(png)
    row = {"truth_notes": 4, "distance": 1, "true_systems": 1, "found_systems": 1}
    for angle in (0.0, 2.5):
        system = SystemText(1, Box(10, 10, 800, 100), "c'4", None)
        keep_sample(tmp_path / str(angle), "lilypond+scan", png, Reading([system], angle), row)
        with Image.open(tmp_path / str(angle) / "lilypond_scan.png") as kept:
            width, height = turned_size((900, 1200), angle)
            assert kept.width == SAMPLE_WIDTH
            assert abs(kept.height - height * SAMPLE_WIDTH / width) <= 1  # PIL rounds its own way


def test_a_second_model_is_compared_on_the_same_pages():
    """--against: the second model's rates minus the first's on the same pages, paired by
    piece; a model better on every piece is told apart (the interval is below 0), one that
    reads as well is not; pages that differ are refused, not compared."""
    first = [row(3, 3, 3, 100, 20 + 2 * k, f"p{k}", 1) for k in range(8)]
    better = [{**r, "distance": r["distance"] - 5 - k % 3} for k, r in enumerate(first)]
    same = [{**r, "distance": r["distance"] + (3 if k % 2 else -3)} for k, r in enumerate(first)]
    told = compare(first, better)
    assert told["note_error_rate_difference"] == pytest.approx(-47 / 800, abs=1e-4)
    assert told["note_error_rate_difference_ci95"][1] < 0
    low, high = compare(first, same)["note_error_rate_difference_ci95"]
    assert low < 0 < high
    with pytest.raises(ValueError, match="same pages"):
        compare(first, first[1:])

    result = {"rows": [{**r, "engraving": "lilypond"} for r in first]}
    other = {
        "rows": [{**r, "engraving": "lilypond"} for r in better],
        "by_engraving": {"lilypond": summarize(better)},
    }
    out = against(Path("model_b"), result, other)["by_engraving"]["lilypond"]
    assert out["note_error_rate"] == summarize(better)["note_error_rate"]
    assert out["note_error_rate_difference"] == told["note_error_rate_difference"]


def test_one_piece_has_a_difference_and_no_interval():
    one = [row(3, 3, 3, 100, 20, "only", k) for k in (1, 2)]
    got = compare(one, [{**r, "distance": 10} for r in one])
    assert (
        got["note_error_rate_difference"] == -0.1 and got["note_error_rate_difference_ci95"] is None
    )
    assert summarize(one)["note_error_rate_ci95"] is None
