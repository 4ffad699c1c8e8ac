"""A part's measures read in order as bars, with the clef, key and time in force.

Clef, key and time carry from measure to measure; a measure that cannot become canonical text
is kept as a bar with an `error` (the reason its system is dropped). Each bar also keeps the
bar line kinds at its two ends (repeats, double, final) and places the measure's dynamics on
its notes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from music21 import bar, clef, dynamics, harmony, key, meter, note, stream

from sonfolio.score.common.lexicon import DURATION_BASES, DYNAMICS, MAJOR_TONICS, MAX_TIME_NUMERATOR
from sonfolio.score.data.notes import BarBuilder, Drop, Event

# music21 clef (sign, line, octave change) -> canonical clef token.
_CLEF_TOKENS = {
    ("G", 2, 0): "treble",
    ("G", 1, 0): "french",
    ("G", 2, -1): '"treble_8"',
    ("G", 2, 1): '"treble^8"',
    ("F", 4, 0): "bass",
    ("F", 3, 0): "varbaritone",
    ("F", 5, 0): "subbass",
    ("F", 4, -1): '"bass_8"',
    ("F", 4, 1): '"bass^8"',
    ("C", 1, 0): "soprano",
    ("C", 2, 0): "mezzosoprano",
    ("C", 3, 0): "alto",
    ("C", 4, 0): "tenor",
    ("C", 5, 0): "baritone",
}


@dataclass(frozen=True)
class State:
    """What is in force at a point: clef token, key as (tonic, mode), time as a string."""

    clef: str
    key: tuple[str, str]
    time: str


# music21 bar line -> the kinds a bar line between two bars combines (sonfolio.score.data.convert
# writes them as `\\bar "T"`); the types the grammar has no token for are counted, removed.
_BARLINE_KINDS = {"double": "double", "final": "final", "light-heavy": "final"}
_PLAIN_BARLINES = frozenset(("regular", "normal", "none", "light"))
_DYNAMIC_TOKENS = {d[1:]: d for d in DYNAMICS}  # "mf" -> "\\mf"


@dataclass
class Bar:
    """One measure (or two merged halves) as items: Event, or a raw token (`\\tuplet 3/2 {`)."""

    items: list[Event | str]
    length: Fraction  # whole notes
    start: State
    end: State  # differs from start when the clef changes inside the bar
    measure: Fraction  # the time signature's bar length
    error: str | None = None
    changed: bool = False  # a clef, key or time element opens this measure
    # bar line kinds at the bar's start and end: "start" / "end" (repeats), "double", "final"
    left: frozenset[str] = frozenset()
    right: frozenset[str] = frozenset()


@dataclass
class Reader:
    """Reads one part's measures in order, carrying clef, key and time from measure to measure."""

    counts: Counter[str]
    state: State
    time_ok: bool = True
    key_ok: bool = True
    # ids of the time signatures seen so far in this part (their objects live in the score)
    seen_times: set[int] = field(default_factory=set)
    restored_time: bool = False  # the last measure read restated an earlier time object
    trill_starts: frozenset[int] = frozenset()  # id() of the notes a trill line starts on

    def read(self, m: stream.Measure) -> Bar:
        before = self.state
        self.restored_time = False
        try:
            elements = self.elements(m)
            self.start_changes(elements)
            start = self.state
            items, length, end_clef = self.events(elements)
            end = _replace(start, clef=end_clef)
            error = None
        except Drop as drop:
            error, items, length, start, end = drop.reason, [], Fraction(0), self.state, self.state
        if error is None:
            error = self.state_error()
        bar_len = _time_length(self.state.time) if error is None else Fraction(0)
        left = _barline_kinds(m.leftBarline, self.counts)
        right = _barline_kinds(m.rightBarline, self.counts)
        return Bar(items, length, start, end, bar_len, error, start != before, left, right)

    def state_error(self) -> str | None:
        if not self.state.clef:
            return "unsupported_clef"
        if not self.state.time:
            return "no_time_signature"
        if not self.time_ok:
            return "unsupported_time"
        if not self.key_ok:
            return "unsupported_key"
        return None

    def elements(self, m: stream.Measure) -> list[tuple[Fraction, object]]:
        """(offset in quarter notes, element), with a single voice unpacked; more voices raise."""
        pairs = [(Fraction(m.elementOffset(e)), e) for e in m.elements]
        voices = [e for _, e in pairs if isinstance(e, stream.Voice)]
        if not voices:
            return pairs
        sounding = [v for v in voices if any(not n.isRest for n in v.notesAndRests)]
        direct = any(isinstance(e, note.GeneralNote) and not e.isRest for _, e in pairs)
        if len(sounding) + direct > 1:
            raise Drop("multi_voice")
        if len(voices) > 1:
            self.counts["rest_voice_removed"] += len(voices) - 1
        keep = sounding[0] if sounding else voices[0]
        outer = [(o, e) for o, e in pairs if not isinstance(e, stream.Voice | note.GeneralNote)]
        inner = [
            (Fraction(keep.elementOffset(e)) + Fraction(m.elementOffset(keep)), e)
            for e in keep.elements
        ]
        # A stable sort keeps music21's order (clefs, signatures, then notes) at one offset.
        return sorted(outer + inner, key=lambda pair: pair[0])

    def start_changes(self, elements: list[tuple[Fraction, object]]) -> None:
        """Apply clef, key and time elements at offset 0; key or time later in the bar raise."""
        for off, el in elements:
            if isinstance(el, clef.Clef) and off == 0:
                self.state = _replace(self.state, clef=clef_token(el))
            elif isinstance(el, key.KeySignature):
                if off != 0:
                    raise Drop("mid_bar_change")
                self.key_ok, k = _key_args(el)
                self.state = _replace(self.state, key=k)
            elif isinstance(el, meter.TimeSignature):
                if off != 0:
                    raise Drop("mid_bar_change")
                self.time_ok = _time_supported(el)
                self.state = _replace(self.state, time=f"{el.numerator}/{el.denominator}")
                # music21's ABC reader splits an overfull bar into a full one and a fragment
                # with an invented time signature, then puts the earlier time signature
                # object itself back on the next bar: that object identity gives it away.
                self.restored_time = id(el) in self.seen_times
                self.seen_times.add(id(el))

    def events(
        self, elements: list[tuple[Fraction, object]]
    ) -> tuple[list[Event | str], Fraction, str]:
        """Notes, rests, chords, tuplet brackets and mid-bar clefs of one measure.

        Returns the items, their length, and the clef in force after the last item (a clef
        after the last note is not an item: it opens the next bar, through `self.state`).
        """
        out = BarBuilder(self.state.clef, self.counts, self.trill_starts)
        # dynamics by offset: each goes on the note or chord starting there, or the next one
        dyns = sorted(
            ((off, el) for off, el in elements if isinstance(el, dynamics.Dynamic)),
            key=lambda pair: pair[0],
        )
        for off, el in elements:
            if isinstance(el, harmony.Harmony):
                self.counts["chord_symbol_removed"] += 1
            elif isinstance(el, note.GeneralNote):
                if el.duration.isGrace or el.duration.quarterLength == 0:
                    out.grace(el)
                    continue
                if off / 4 != out.pos:
                    raise Drop("offset_gap" if off / 4 > out.pos else "overlap")
                dynamic = None
                if dyns and dyns[0][0] <= off and not el.isRest:
                    dynamic = self.dynamic(dyns, off)
                out.add(el, dynamic)
            elif isinstance(el, clef.Clef) and off > 0:
                token = clef_token(el)
                if token != self.state.clef:
                    self.state = _replace(self.state, clef=token)
                    if not token:
                        raise Drop("unsupported_clef")
                    out.clef(token)
        items = out.finish()
        if dyns:
            self.counts["dynamic_without_note_removed"] += len(dyns)
        return items, out.pos, out.clef_at_end

    def dynamic(self, dyns: list[tuple[Fraction, dynamics.Dynamic]], off: Fraction) -> str | None:
        """The supported dynamic at or before `off` that is nearest to it (taken from `dyns`;
        of two at one offset, the first); the others there are counted as removed."""
        found, found_at = None, None
        while dyns and dyns[0][0] <= off:
            at, dyn = dyns.pop(0)
            value = str(dyn.value)
            token = _DYNAMIC_TOKENS.get(value)
            if token is None:
                name = value if value.isalpha() and len(value) <= 6 else "other"
                self.counts[f"dynamic_{name}_removed"] += 1
                continue
            if found is not None:
                self.counts["dynamic_extra_removed"] += 1
                if at == found_at:
                    continue
            found, found_at = token, at
        return found


def _barline_kinds(line: bar.Barline | None, counts: Counter[str]) -> frozenset[str]:
    """A music21 bar line as the kinds the canonical text keeps (repeats, double, final)."""
    if line is None:
        return frozenset()
    if isinstance(line, bar.Repeat):
        return frozenset(("start" if line.direction == "start" else "end",))
    kind = _BARLINE_KINDS.get(line.type)
    if kind is not None:
        return frozenset((kind,))
    if line.type not in _PLAIN_BARLINES:
        counts[f"barline_{str(line.type).replace('-', '_')}_removed"] += 1
    return frozenset()


def _replace(state: State, **changes: object) -> State:
    return State(**{**state.__dict__, **changes})


def clef_token(c: clef.Clef) -> str:
    """The canonical clef token, or "" for a clef the grammar lacks (percussion, tab...).

    An unsupported clef stays in force (as "") until a supported one replaces it, so every bar
    written in it is dropped, not engraved in the clef before it.
    """
    return _CLEF_TOKENS.get((c.sign, c.line, c.octaveChange or 0), "")


def _key_args(ks: key.KeySignature) -> tuple[bool, tuple[str, str]]:
    """(supported, (tonic, "major")): a key by its signature, the major key with it, whatever
    the mode (an image shows the signature only; canonical format 2)."""
    sharps = ks.sharps
    if getattr(ks, "isNonTraditional", False) or sharps is None or abs(sharps) > 7:
        return False, ("c", "major")
    return True, (MAJOR_TONICS[sharps + 7], "major")


def _time_supported(ts: meter.TimeSignature) -> bool:
    return 1 <= ts.numerator <= MAX_TIME_NUMERATOR and ts.denominator in DURATION_BASES


def _time_length(time: str) -> Fraction:
    num, den = time.split("/")
    return Fraction(int(num), int(den))
