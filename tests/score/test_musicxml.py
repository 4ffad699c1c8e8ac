"""The MusicXML of a reading, read back by music21: the same notes as the canonical text."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import pytest
from music21 import converter, dynamics, expressions, spanner
from score.test_canonical import GOOD, MARKED  # tests/ is on sys.path

from sonfolio.score.common import lexicon as lx
from sonfolio.score.common.musicxml import musicxml_bytes, score_of
from sonfolio.score.data.synth import synth_systems
from sonfolio.score.eval.page_eval import notes_of


def round_trip(texts, tmp_path):
    path = tmp_path / "read.musicxml"
    path.write_bytes(musicxml_bytes(score_of([(t, None) for t in texts])))
    return converter.parse(path)


def canonical_notes(texts):
    """(pitch, quarter length, onset in quarters) of every note the texts spell, in order."""
    notes, onset = [], Fraction(0)
    for text in texts:
        found, end = notes_of(text)
        notes += [(n.pitch, n.length, (onset + n.onset) * 4) for n in found]
        onset += end
    return notes


def read_back_notes(score):
    """The same from music21's reading of the file (grace notes last nothing: left out, as
    notes_of leaves them)."""
    found = []
    for el in score.flatten().notes:
        if el.duration.isGrace:
            continue
        for p in el.pitches:
            found.append((p.nameWithOctave, Fraction(el.quarterLength), Fraction(el.offset)))
    return found


def by_piece():
    systems = synth_systems(60, 11, 4)
    return [
        [s.text for s in group] for _, group in itertools.groupby(systems, key=lambda s: s.piece)
    ]


@pytest.mark.parametrize("piece", range(8))  # 60 systems hold 8 pieces
def test_a_piece_read_back_has_the_notes_of_its_canonical_text(piece, tmp_path):
    texts = by_piece()[piece]
    score = round_trip(texts, tmp_path)
    assert read_back_notes(score) == canonical_notes(texts)


def test_markings_ties_and_bar_lines_survive(tmp_path):
    texts = MARKED + [t for t in GOOD if "\\tuplet" in t or "~" in t or "\\bar" in t][:8]
    for text in texts:
        score = round_trip([text], tmp_path)
        assert read_back_notes(score) == canonical_notes([text]), text
        toks = text.split(" ")
        flat = list(score.flatten().notesAndRests)
        arts = Counter(type(a).__name__ for n in flat for a in n.articulations)
        want = {
            "Staccato": toks.count("-."),
            "Tenuto": toks.count("--"),
            "Accent": toks.count("->"),
            "StrongAccent": toks.count("-^"),
        }
        assert {k: arts[k] for k in want} == want, text
        fermatas = sum(isinstance(e, expressions.Fermata) for n in flat for e in n.expressions)
        assert fermatas == toks.count("\\fermata"), text
        dyn = len(score.recurse().getElementsByClass(dynamics.Dynamic))
        assert dyn == sum(t in lx.DYNAMICS for t in toks), text
        assert len(score.recurse().getElementsByClass(spanner.Slur)) == toks.count("("), text
        ties = sum(n.tie is not None and n.tie.type == "start" for n in score.flatten().notes)
        assert (ties > 0) == any(t.endswith("~") for t in toks), text
        graces = sum(n.duration.isGrace for n in flat)
        assert (graces > 0) == any(t in lx.GRACES for t in toks), text


@pytest.mark.parametrize("where", ["middle", "last", "only"])
def test_a_system_left_out_is_marked_where_it_stood(where, tmp_path):
    path = tmp_path / "gap.musicxml"
    gap = (None, "[page.png system 2: not read]")
    systems = {
        "middle": [(GOOD[0], None), gap, (GOOD[0], None)],
        "last": [(GOOD[0], None), gap],
        "only": [gap],
    }[where]
    path.write_bytes(musicxml_bytes(score_of(systems)))
    score = converter.parse(path)
    words = [e.content for e in score.recurse() if hasattr(e, "content")]
    assert words == ["[page.png system 2: not read]"]
    assert read_back_notes(score) == canonical_notes([t for t, _ in systems if t])
