"""Canonical text as MusicXML, the file musicians open in MuseScore, Finale, Sibelius or Dorico.

`read --format musicxml` and POST /read?format=musicxml write a reading with it: the systems
read from one or more images, in order, become one part (a page's systems are one piece, and
so are the pages of a piece read together). The evaluation hands the MusicXML of held-out
music to a second engraver (Verovio, sonfolio/score/common/verovio.py).

music21 builds the score from the canonical text's clefs, keys, times, pickup, notes, chords,
rests, ties, tuplets, grace notes, markings (articulations, fermatas, trills, dynamics, slurs)
and bar lines, and writes the MusicXML.

Why a walk of our own over the tokens: no library reads LilyPond into music21 (music21 writes
LilyPond but does not parse it), and the canonical grammar is small and fixed (sonfolio.score.
common.lexicon): one token is one thing here. Only texts that validate are written; a system
that does not is left out, said in the log and marked in the score itself (a text above the
measure where it would have stood), so the gap is never silent.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from music21 import (
    articulations,
    bar,
    chord,
    clef,
    duration,
    dynamics,
    expressions,
    key,
    metadata,
    meter,
    note,
    spanner,
    stream,
)
from music21 import tie as ties
from music21.musicxml.m21ToXml import GeneralObjectExporter
from music21.stream import makeNotation

from sonfolio.score.common import lexicon as lx

# Canonical clef token -> music21 (sign + line, octave shift); the inverse of the data stage's
# table (sonfolio.score.data.measures).
_CLEFS: dict[str, tuple[str, int]] = {
    "treble": ("G2", 0),
    "french": ("G1", 0),
    '"treble_8"': ("G2", -1),
    '"treble^8"': ("G2", 1),
    "bass": ("F4", 0),
    "varbaritone": ("F3", 0),
    "subbass": ("F5", 0),
    '"bass_8"': ("F4", -1),
    '"bass^8"': ("F4", 1),
    "soprano": ("C1", 0),
    "mezzosoprano": ("C2", 0),
    "alto": ("C3", 0),
    "tenor": ("C4", 0),
    "baritone": ("C5", 0),
}
_ARTICULATIONS = {
    "-.": articulations.Staccato,
    "--": articulations.Tenuto,
    "->": articulations.Accent,
    "-^": articulations.StrongAccent,
}
_DURATION = re.compile(lx.DURATION_RE)
_BAR_ENDS = {'":|."': "end", '":..:"': "end", '"||"': "double", '"|."': "final"}


def _pitch(name: str) -> str:
    """A canonical pitch ("fis''") as music21 spells it ("F#5")."""
    m = lx.PITCH.fullmatch(name)
    if m is None:
        raise ValueError(f"not a canonical pitch: {name!r}")
    marks = m.group(3) or ""
    octave = 3 + (len(marks) if marks.startswith("'") else -len(marks))
    accidental = {1: "#", 2: "##", -1: "-", -2: "--", 0: ""}[lx.ALTER[m.group(2) or ""]]
    return f"{m.group(1).upper()}{accidental}{octave}"


class _Writer:
    """Builds one part from canonical systems, bar by bar."""

    def __init__(self) -> None:
        self.part = stream.Part()
        self.measure = stream.Measure(number=1)
        self.clef, self.key, self.time = "", "", ""
        self.pickup: Fraction | None = None
        self.scale = Fraction(1)  # a tuplet's M/N
        self.tuplet: tuple[int, int] | None = None
        self.grace: str | None = None  # the grace command of an open group
        # the notes of the event before by pitch, when it ends in a tie: a note of the next
        # event at one of those pitches continues it (LilyPond ties only the pitches that go on)
        self.tied: dict[str, note.Note] = {}
        self.last: note.GeneralNote | None = None  # the event markings attach to
        self.slur: list[note.GeneralNote] | None = None
        self.start_repeat = False

    # --- the bar in progress ---

    def close_bar(self) -> None:
        """Ends the measure in progress (a `|`, or the system's end with music in it)."""
        if not self.measure.notesAndRests:
            return
        if self.pickup is not None and self.measure.number == 1:
            self.measure.padAsAnacrusis()  # a pickup: measure 0, as engravers number it
            self.measure.number, self.pickup = 0, None
        self.part.append(self.measure)
        self.measure = stream.Measure(number=self.measure.number + 1)
        if self.start_repeat:
            self.measure.leftBarline = bar.Repeat(direction="start")
            self.start_repeat = False

    def annotate(self, text: str) -> None:
        """A text above the staff where the next music stands."""
        self.measure.insert(self._offset(), expressions.TextExpression(text))

    def _offset(self) -> float:
        return float(self.measure.highestTime)

    # --- the tokens ---

    def system(self, text: str) -> None:
        toks = text.split(" ")
        i = 0
        while i < len(toks):
            i = self.token(toks, i)
        self.close_bar()

    def token(self, toks: list[str], i: int) -> int:
        """Reads the token at `i` (with its arguments); the index after them."""
        tok = toks[i]
        if tok == "\\clef":
            self.set_clef(toks[i + 1])
            return i + 2
        if tok == "\\key":
            self.set_key(toks[i + 1])
            return i + 3
        if tok == "\\time":
            self.set_time(toks[i + 1])
            return i + 2
        if tok == "\\partial":
            self.pickup = lx.duration_value(toks[i + 1].split("*")[0])
            return i + 2
        if tok == "\\bar":
            self.bar_line(toks[i + 1])
            return i + 2
        if tok == "\\tuplet":
            n, m = (int(x) for x in toks[i + 1].split("/"))
            self.tuplet, self.scale = (n, m), Fraction(m, n)
            return i + 3  # the ratio and its `{`
        if tok in lx.GRACES:
            self.grace = tok
            return i + 2  # its `{`
        if tok == "}":
            if self.grace is not None:
                self.grace = None
            else:
                self.tuplet, self.scale = None, Fraction(1)
            return i + 1
        if tok == "|":
            self.close_bar()
            return i + 1
        if tok in lx.MARK_RANK:
            self.marking(tok)
            return i + 1
        if tok.startswith("<"):
            j = i
            while ">" not in toks[j]:
                j += 1
            self.chord(toks[i : j + 1])
            return j + 1
        self.event(tok)
        return i + 1

    def set_clef(self, tok: str) -> None:
        if tok == self.clef:
            return
        sign, shift = _CLEFS[tok]
        self.clef = tok
        self.measure.insert(self._offset(), clef.clefFromString(sign, octaveShift=shift))

    def set_key(self, tonic: str) -> None:
        if tonic == self.key:
            return
        self.key = tonic
        sharps = lx.MAJOR_TONICS.index(tonic) - 7
        self.measure.insert(0, key.KeySignature(sharps))

    def set_time(self, time: str) -> None:
        if time == self.time:
            return
        self.time = time
        self.measure.insert(0, meter.TimeSignature(time))

    def bar_line(self, kind: str) -> None:
        if kind in ('".|:"', '":..:"'):
            self.start_repeat = True
            if not self.measure.notesAndRests:  # a line that opens with a start repeat
                self.measure.leftBarline = bar.Repeat(direction="start")
                self.start_repeat = False
        end = _BAR_ENDS.get(kind)
        if end == "end":
            self.measure.rightBarline = bar.Repeat(direction="end")
        elif end is not None:
            self.measure.rightBarline = bar.Barline(end)

    def length(self, dur: str) -> duration.Duration:
        m = _DURATION.fullmatch(dur)
        d = duration.Duration(float(lx.dur_value(m.group(1), m.group(2)) * 4))
        if self.tuplet is not None and self.grace is None:
            n, mm = self.tuplet
            kind = duration.typeFromNumDict[int(m.group(1))]  # the tuplet counts in its own
            d.appendTuplet(duration.Tuplet(n, mm, durationActual=kind, durationNormal=kind))
        return d

    def event(self, tok: str) -> None:
        rest = lx.REST.fullmatch(tok)
        if rest is not None:
            self.place(note.Rest(duration=self.length(rest.group(1) + rest.group(2))), [])
            return
        m = lx.NOTE.fullmatch(tok)
        if m is None:
            raise ValueError(f"not a canonical event: {tok!r}")
        name = _pitch(m.group(1))
        n = note.Note(name, duration=self.length(m.group(2) + m.group(3)))
        self.place(n, [(name, n)], tie=bool(m.group(4)))

    def chord(self, toks: list[str]) -> None:
        last = lx.CHORD_END.fullmatch(toks[-1])
        names = [_pitch(t) for t in [toks[0][1:], *toks[1:-1], last.group(1)]]
        c = chord.Chord(names, duration=self.length(last.group(2) + last.group(3)))
        self.place(c, list(zip(names, c.notes, strict=True)), tie=bool(last.group(4)))

    def place(self, el: Any, pitches: list[tuple[str, note.Note]], tie: bool = False) -> None:
        if self.grace is not None:  # grace notes leave a pending tie alone
            el = el.getGrace()
            el.duration.slash = self.grace == "\\acciaccatura"
        else:
            for name, n in pitches:
                if (before := self.tied.get(name)) is not None:
                    held = before.tie is not None and before.tie.type == "stop"
                    before.tie = ties.Tie("continue" if held else "start")
                    n.tie = ties.Tie("stop")
            self.tied = dict(pitches) if tie else {}
        self.measure.insert(self._offset(), el)
        self.last = el
        if self.slur is not None:
            self.slur.append(el)

    def marking(self, tok: str) -> None:
        el = self.last
        if tok in _ARTICULATIONS:
            el.articulations.append(_ARTICULATIONS[tok]())
        elif tok == "\\fermata":
            el.expressions.append(expressions.Fermata())
        elif tok == "\\trill":
            el.expressions.append(expressions.Trill())
        elif tok == lx.SLUR_START:
            self.slur = [el]
        elif tok == lx.SLUR_END:
            self.part.insert(0, spanner.Slur(self.slur))
            self.slur = None
        else:  # a dynamic, at its note
            self.measure.insert(el.offset, dynamics.Dynamic(tok[1:]))


def score_of(
    systems: Sequence[tuple[str | None, str | None]],
    title: str = "",
    time: str | None = None,
    first_bar: int | None = None,
) -> stream.Score:
    """One part from canonical systems in order: (text, or None for a system left out, and
    the note that stands in its place). `time`: the time signature in force before the first
    system when its header prints none (a continuation system): in force, not printed.
    `first_bar`: the number of the first bar (a continuation system's; default 1, a pickup 0).
    """
    writer = _Writer()
    if time is not None:
        writer.time = time
        hidden = meter.TimeSignature(time)
        hidden.style.hideObjectOnPrint = True  # <time print-object="no">: beams need it
        writer.measure.insert(0, hidden)
    for text, gap in systems:
        if text is None:
            writer.annotate(gap or "a system left out")
        else:
            writer.system(text)
    writer.close_bar()
    if len(writer.measure) or not writer.part.getElementsByClass(stream.Measure):
        # what stands after the last music (the note of a last system left out), or the one
        # measure of a score that has no music at all, which says why
        writer.part.append(writer.measure)
    if first_bar is not None:
        for k, measure in enumerate(writer.part.getElementsByClass(stream.Measure)):
            measure.number = first_bar + k
    score = stream.Score([writer.part])
    score.metadata = metadata.Metadata(title=title or "read by sonfolio")
    return score


def musicxml_bytes(score: stream.Score) -> bytes:
    """The score as an uncompressed MusicXML document.

    music21's own notation pass is off: it merges tied notes that complete a tuplet into one
    (two tied duplet eighths become a dotted quarter), which is not what the page printed. Its
    other steps are run here, measure by measure: beams, tuplet brackets, accidentals.
    """
    for part in score.parts:
        for measure in part.getElementsByClass(stream.Measure):
            with contextlib.suppress(stream.StreamException):  # one music21 cannot beam
                measure.makeBeams(inPlace=True)
            makeNotation.makeTupletBrackets(measure, inPlace=True)
        part.makeAccidentals(inPlace=True, cautionaryNotImmediateRepeat=False)
    exporter = GeneralObjectExporter(score)
    exporter.makeNotation = False
    return exporter.parse()


def reading_musicxml(results: Sequence[tuple[str, Any]]) -> tuple[bytes, list[str]]:
    """The MusicXML of the readings of one or more images (one part, in order), and a line
    for each system left out because its text is not canonical. A reading is
    sonfolio.score.decode.read.Reading: its `systems` have `index`, `text` and `problem`."""
    systems: list[tuple[str | None, str | None]] = []
    left_out: list[str] = []
    for name, reading in results:
        for s in reading.systems:
            if s.problem is None:
                systems.append((s.text, None))
            else:
                where = f"{name} system {s.index}"
                left_out.append(f"{where}: {s.problem}")
                systems.append((None, f"[{where}: not read, its text is not canonical]"))
    title = results[0][0] if len(results) == 1 else f"{results[0][0]} and {len(results) - 1} more"
    return musicxml_bytes(score_of(systems, title)), left_out
