"""A measure's notes, rests and chords as canonical LilyPond events, tuplets included.

Durations one token cannot say are split into tied pieces; music21's tuplet marks open and
close `\\tuplet` groups.

Pitches are written pitch, as music21 holds them (sonfolio.score.convert transposes a part
held at sounding pitch first). Anything the grammar cannot say raises Drop, whose reason is
counted and the measure's system dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from music21 import chord, note

from sonfolio.score.canonical import (
    DURATION_BASES,
    MAX_DOWN_OCTAVES,
    MAX_TUPLET_NUMBER,
    MAX_UP_OCTAVES,
    duration_token,
    duration_value,
    pitch_name,
    pitch_order,
)

MAX_SPLIT_PARTS = 4  # a note split into more tied pieces than this is not worth a system


class Drop(Exception):
    """Raised inside a measure that cannot become canonical text; `reason` names why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Event:
    """A note, rest or chord as canonical text, with what deciding its tie needs."""

    text: str  # a note, rest or chord without its tie
    pitches: frozenset[tuple[int, int]]
    tie: bool  # tied to the next event in the source


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
    """A measure's events; opens and closes `\\tuplet` groups as music21 marks them."""

    def __init__(self, start_clef: str) -> None:
        self.start_clef = start_clef
        self.clef_at_end = start_clef  # the clef in force after the last kept item
        self.items: list[Event | str] = []
        self.pos = Fraction(0)  # whole notes from the bar start
        self.group: tuple[str, Fraction, Fraction] | None = None  # (ratio, filled, full length)

    def add(self, el: note.GeneralNote) -> None:
        pitches = _event_pitches(el)
        tied = _is_tied(el)
        length = Fraction(el.duration.quarterLength) / 4
        tuplets = el.duration.tuplets
        if len(tuplets) > 1:
            raise Drop("nested_tuplet")
        if tuplets:
            self.add_tupleted(pitches, tied, length, tuplets[0])
        else:
            self.close_group()
            parts = _split_duration(length)
            for k, dur in enumerate(parts):
                last = k == len(parts) - 1
                self.items.append(_event(pitches, dur, tied if last else bool(pitches)))
        self.pos += length

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
        self.items.append(f"\\clef {token}")

    def close_group(self) -> None:
        if self.group is not None:
            self.items.append("}")
            self.group = None

    def finish(self) -> list[Event | str]:
        self.close_group()
        # A clef after the last note applies to the next bar; the caller's state carries it.
        while self.items and _is_clef(self.items[-1]):
            self.items.pop()
        clefs = [it for it in self.items if _is_clef(it)]
        self.clef_at_end = clefs[-1].split(" ", 1)[1] if clefs else self.start_clef
        return self.items


def _is_clef(item: Event | str) -> bool:
    return isinstance(item, str) and item.startswith("\\clef ")


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
