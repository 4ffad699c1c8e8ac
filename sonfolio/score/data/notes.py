"""A measure's notes, rests and chords as canonical LilyPond events, tuplets included.

Durations one token cannot say are split into tied pieces; music21's tuplet marks open and
close `\\tuplet` groups. Markings (canonical format 3) ride on the events: articulations,
fermatas and trills read from each note, a dynamic handed in by the measure reader, slur ends
set later by sonfolio.score.data.convert (slurs span bars); grace notes gather into a
`\\grace { }` or `\\acciaccatura { }` group before the note they ornament.

Pitches are written pitch, as music21 holds them (sonfolio.score.data.convert transposes a part
held at sounding pitch first). Anything the grammar cannot say raises Drop, whose reason is
counted and the measure's system dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from fractions import Fraction

from music21 import articulations, chord, duration, expressions, note

from sonfolio.score.common.lexicon import (
    ARTICULATIONS,
    DURATION_BASES,
    MAX_DOWN_OCTAVES,
    MAX_GRACE_EVENTS,
    MAX_TUPLET_NUMBER,
    MAX_UP_OCTAVES,
    duration_token,
    duration_value,
    marking_tokens,
    pitch_name,
    pitch_order,
)

MAX_SPLIT_PARTS = 4  # a note split into more tied pieces than this is not worth a system

# music21 articulation class (exactly: a Staccatissimo is a Staccato subclass, but another
# sign) -> canonical token.
_ARTICULATION_TOKENS: dict[type, str] = {
    articulations.Staccato: "-.",
    articulations.Tenuto: "--",
    articulations.Accent: "->",
    articulations.StrongAccent: "-^",
}
FERMATA, TRILL = "\\fermata", "\\trill"
_MARK_ORDER = {tok: k for k, tok in enumerate(ARTICULATIONS)}


class Drop(Exception):
    """Raised inside a measure that cannot become canonical text; `reason` names why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Event:
    """A note, rest or chord as canonical text, with what deciding its tie needs, and its
    markings (a note split into tied pieces carries them on its first piece)."""

    text: str  # a note, rest or chord without its tie
    pitches: frozenset[tuple[int, int]]
    tie: bool  # tied to the next event in the source
    marks: tuple[str, ...] = ()  # articulations, fermata, trill: in canonical order
    dynamic: str | None = None  # `\\mf`...
    # id() of the music21 elements this event stands for (the note, and its grace notes):
    # slurs find their ends by them
    sources: tuple[int, ...] = ()
    slur_end: bool = False
    slur_start: bool = False

    def render(self, tie: bool) -> str:
        """The event's tokens: the event (with `~` when `tie`), then its markings."""
        head = f"{self.text}~" if tie else self.text
        marks = marking_tokens(self.marks, self.dynamic, self.slur_end, self.slur_start)
        return " ".join([head, *marks])


def _pitch(p) -> str:
    """Canonical absolute pitch of a music21 Pitch (written as music21 holds it)."""
    alter = p.accidental.alter if p.accidental is not None else 0
    if alter != int(alter) or abs(alter) > 2:
        raise Drop("unsupported_accidental")
    octave = p.octave if p.octave is not None else p.implicitOctave
    if not -MAX_DOWN_OCTAVES <= octave - 3 <= MAX_UP_OCTAVES:
        raise Drop("pitch_range")
    return pitch_name(p.step.lower(), int(alter), octave)


class BarBuilder:
    """A measure's events; opens and closes `\\tuplet` groups as music21 marks them, and
    gathers grace notes into a group before the note or chord they ornament.

    `counts` takes what is removed (markings the grammar lacks, grace notes it cannot place);
    `trill_starts` holds the id() of the notes a trill extension line starts on.
    """

    def __init__(
        self,
        start_clef: str,
        counts: Counter[str] | None = None,
        trill_starts: Collection[int] = (),
    ) -> None:
        self.start_clef = start_clef
        self.clef_at_end = start_clef  # the clef in force after the last kept item
        self.counts: Counter[str] = Counter() if counts is None else counts
        self.trill_starts = trill_starts
        self.items: list[Event | str] = []
        self.pos = Fraction(0)  # whole notes from the bar start
        self.group: tuple[str, Fraction, Fraction] | None = None  # (ratio, filled, full length)
        # grace notes waiting for their main note: (canonical event text, id, slashed)
        self.graces: list[tuple[str, int, bool]] = []

    def add(self, el: note.GeneralNote, dynamic: str | None = None) -> None:
        """Add a note, rest or chord (with the dynamic the measure places on it, if any)."""
        pitches = _event_pitches(el)
        tied = _is_tied(el)
        length = Fraction(el.duration.quarterLength) / 4
        tuplets = el.duration.tuplets
        if len(tuplets) > 1:
            raise Drop("nested_tuplet")
        marks = event_marks(el, not pitches, self.trill_starts, self.counts)
        graces, self.graces = self.graces, []
        if graces and (not pitches or tuplets):  # a grace group never opens a tuplet
            self.counts["grace_note_removed"] += len(graces)
            graces = []
        sources = (id(el), *(g[1] for g in graces))
        at = len(self.items)
        if tuplets:
            self.add_tupleted(pitches, tied, length, tuplets[0])
        else:
            self.close_group()
            if graces:
                self.items.append(_grace_group(graces))
            parts = _split_duration(length)
            for k, dur in enumerate(parts):
                last = k == len(parts) - 1
                self.items.append(_event(pitches, dur, tied if last else bool(pitches)))
        first = next(it for it in self.items[at:] if isinstance(it, Event))
        first.marks, first.dynamic, first.sources = marks, dynamic, sources
        self.pos += length

    def grace(self, el: note.GeneralNote) -> None:
        """A grace note (or chord): kept for the next note or chord of the bar."""
        token = _grace_duration(el)
        try:
            pitches = _event_pitches(el) if token is not None else []
        except Drop:  # a grace note the grammar cannot spell costs only itself
            pitches = []
        if not pitches:  # a grace rest, or no written value
            self.counts["grace_note_removed"] += 1
            return
        _count_marks_removed(el, self.counts)  # a grace note takes no markings
        text = _event(pitches, token, False).text
        self.graces.append((text, id(el), bool(getattr(el.duration, "slash", False))))
        if len(self.graces) > MAX_GRACE_EVENTS:  # a longer run: none of it is kept
            self.drop_graces()

    def drop_graces(self) -> None:
        if self.graces:
            self.counts["grace_note_removed"] += len(self.graces)
            self.graces = []

    def add_tupleted(self, pitches: list[str], tied: bool, length: Fraction, tup) -> None:
        mult = Fraction(tup.tupletMultiplier())  # written length * mult = sounding length
        ratio = _tuplet_ratio(tup, mult)
        written = duration_token(length / mult)
        if written is None:
            raise Drop("unsupported_duration")
        if self.group is not None and (self.group[0] != ratio or tup.type == "start"):
            self.close_group()
        if self.group is None:
            full = Fraction(tup.totalTupletLength()) / 4
            self.items.append(f"\\tuplet {ratio} {{")
            self.group = (ratio, Fraction(0), full)
        self.items.append(_event(pitches, written, tied))
        filled = self.group[1] + length
        self.group = (ratio, filled, self.group[2])
        if filled >= self.group[2] or tup.type == "stop":
            self.close_group()

    def clef(self, token: str) -> None:
        self.close_group()
        self.drop_graces()  # a grace group is directly followed by its note
        self.items.append(f"\\clef {token}")

    def close_group(self) -> None:
        if self.group is not None:
            self.items.append("}")
            self.group = None

    def finish(self) -> list[Event | str]:
        self.close_group()
        self.drop_graces()  # grace notes after the bar's last note ornament nothing here
        # A clef after the last note applies to the next bar; the caller's state carries it.
        while self.items and _is_clef(self.items[-1]):
            self.items.pop()
        clefs = [it for it in self.items if _is_clef(it)]
        self.clef_at_end = clefs[-1].split(" ", 1)[1] if clefs else self.start_clef
        return self.items


def _is_clef(item: Event | str) -> bool:
    return isinstance(item, str) and item.startswith("\\clef ")


def event_marks(
    el: note.GeneralNote, rest: bool, trill_starts: Collection[int], counts: Counter[str]
) -> tuple[str, ...]:
    """The canonical articulation tokens of a note, chord or rest (a rest keeps only a
    fermata); the others are counted by kind (`articulation_staccatissimo_removed`)."""
    arts, exps = el.articulations, el.expressions
    if not arts and not exps and id(el) not in trill_starts:
        return ()
    found = set()
    for a in arts:
        tok = _ARTICULATION_TOKENS.get(type(a))
        if tok is None or rest:
            counts[f"articulation_{type(a).__name__.lower()}_removed"] += 1
        else:
            found.add(tok)
    for e in exps:
        if isinstance(e, expressions.Fermata):
            found.add(FERMATA)
        elif _is_trill(e) and not rest:
            found.add(TRILL)
        else:
            counts[f"expression_{type(e).__name__.lower()}_removed"] += 1
    if id(el) in trill_starts and not rest:
        found.add(TRILL)
    return tuple(sorted(found, key=_MARK_ORDER.__getitem__))


def _is_trill(e: object) -> bool:
    # a shake is drawn otherwise; the other trills (half-step, whole-step...) print `tr`
    return isinstance(e, expressions.Trill) and not isinstance(e, expressions.Shake)


def _count_marks_removed(el: note.GeneralNote, counts: Counter[str]) -> None:
    for a in el.articulations:
        counts[f"articulation_{type(a).__name__.lower()}_removed"] += 1
    for e in el.expressions:
        counts[f"expression_{type(e).__name__.lower()}_removed"] += 1


def _grace_duration(el: note.GeneralNote) -> str | None:
    """A grace note's written value (`16`), from its type and dots; None when none exists."""
    d = el.duration
    quarters = duration.typeToDuration.get(d.type)
    if not quarters:
        return None
    length = Fraction(quarters) / 4 * (2 - Fraction(1, 2**d.dots))
    return duration_token(length)


def _grace_group(graces: list[tuple[str, int, bool]]) -> str:
    """`\\acciaccatura { ... }` when every grace note is slashed, else `\\grace { ... }`."""
    command = "\\acciaccatura" if all(g[2] for g in graces) else "\\grace"
    return " ".join([command, "{", *(g[0] for g in graces), "}"])


def _event_pitches(el: note.GeneralNote) -> list[str]:
    """Sorted distinct pitches of a note or chord; [] for a rest."""
    if isinstance(el, note.Rest):
        return []
    if isinstance(el, note.Note):
        return [_pitch(el.pitch)]
    if isinstance(el, chord.Chord):
        return sorted({_pitch(p) for p in el.pitches}, key=pitch_order)
    raise Drop("unpitched")


def _is_tied(el: note.GeneralNote) -> bool:
    ties = [el.tie] + ([n.tie for n in el.notes] if isinstance(el, chord.Chord) else [])
    return any(t is not None and t.type in ("start", "continue") for t in ties)


def _event(pitches: list[str], dur: str, tie: bool) -> Event:
    if not pitches:
        return Event(f"r{dur}", frozenset(), False)
    text = f"{pitches[0]}{dur}" if len(pitches) == 1 else f"<{' '.join(pitches)}>{dur}"
    return Event(text, frozenset(pitch_order(p) for p in pitches), tie)


def _tuplet_ratio(tup, mult: Fraction) -> str:
    """`N/M` for `\\tuplet`: music21's own numbers when they agree with the multiplier."""
    actual, normal = tup.numberNotesActual, tup.numberNotesNormal
    if actual and normal and Fraction(normal, actual) == mult:
        num, den = actual, normal
    else:
        num, den = mult.denominator, mult.numerator
    if num == den or max(num, den) > MAX_TUPLET_NUMBER:
        raise Drop("unsupported_tuplet")
    return f"{num}/{den}"


def _split_duration(length: Fraction) -> list[str]:
    """Duration tokens summing to `length`, longest first (tied when a note needs several)."""
    if length <= 0:
        raise Drop("unsupported_duration")
    single = duration_token(length)
    if single is not None:
        return [single]
    parts: list[str] = []
    rest = length
    for base in DURATION_BASES:
        while rest >= Fraction(1, base) and len(parts) < MAX_SPLIT_PARTS:
            tok = _longest_fitting(rest, base)
            parts.append(tok)
            rest -= duration_value(tok)
    if rest != 0 or len(parts) > MAX_SPLIT_PARTS:
        raise Drop("unsupported_duration")
    return parts


def _longest_fitting(rest: Fraction, base: int) -> str:
    for dots in ("..", ".", ""):
        tok = f"{base}{dots}"
        if duration_value(tok) <= rest:
            return tok
    raise AssertionError("unreachable: rest >= 1/base")
