"""Real music to canonical LilyPond systems: parse a file with music21, cut each part into systems.

Every emitted text passes `canonical.validate`, whose bar arithmetic is LilyPond's: a system
that would compile with a bar-check warning is dropped and counted instead, so an image never
disagrees with its text. docs/canonical-lilypond.md lists what is dropped and why.

Pitches are written pitch (as engraved for the player, what MusicXML stores); a part that
music21 holds at sounding pitch is transposed back to written pitch first.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from music21 import chord, clef, converter, harmony, instrument, key, meter, note, stream

from sonfolio.score.canonical import (
    DURATION_BASES,
    MAJOR_TONICS,
    MAX_DOWN_OCTAVES,
    MAX_TIME_NUMERATOR,
    MAX_TUPLET_NUMBER,
    MAX_UP_OCTAVES,
    MINOR_TONICS,
    CanonicalError,
    System,
    duration_token,
    duration_value,
    partial_token,
    pitch_name,
    pitch_order,
    validate,
)

__all__ = ["SUFFIXES", "SourceError", "System", "pieces_from_file", "systems_from_score"]

log = logging.getLogger(__name__)

SUFFIXES = {
    ".xml": "musicxml",
    ".musicxml": "musicxml",
    ".mxl": "musicxml",
    ".krn": "humdrum",
    ".abc": "abc",
}

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
_ABC_TUNE_START = re.compile(r"^X:\s*(\S*)", re.MULTILINE)
MAX_SPLIT_PARTS = 4  # a note split into more tied pieces than this is not worth a system


class SourceError(ValueError):
    """A source file (or tune) that yields no music; `reason` is a short snake_case tag."""

    def __init__(self, path: Path | str, reason: str, detail: str) -> None:
        super().__init__(f"{path}: {reason}: {detail}")
        self.path = str(path)
        self.reason = reason


class _Drop(Exception):
    """Raised inside a measure that cannot become canonical text; `reason` names why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# Parsing files


def abc_tunes(text: str) -> list[tuple[str, str]]:
    """Split an ABC file into (reference number, tune text); numbers made unique by a suffix.

    A repeated `X:` number gets `-2`, `-3`...; a missing one is replaced by the ordinal `n<k>`.
    """
    starts = [(m.start(), m.group(1)) for m in _ABC_TUNE_START.finditer(text)]
    tunes: list[tuple[str, str]] = []
    seen: Counter[str] = Counter()
    for k, (start, number) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
        number = number or f"n{k + 1}"
        seen[number] += 1
        name = number if seen[number] == 1 else f"{number}-{seen[number]}"
        tunes.append((name, text[start:end]))
    return tunes


def pieces_from_file(
    path: Path, *, skipped: Counter[str] | None = None
) -> list[tuple[str, stream.Score]]:
    """Parse a MusicXML, kern or ABC file into (suffix, score) pairs, one per piece.

    The suffix is "" for a file holding one piece; for a file holding several (an ABC file of
    many tunes, an opus) it is the tune's `X:` reference number (made unique: `12`, `12-2`)
    or, for other formats, the 1-based position. Piece id: `f"{file_id}#{suffix}"`.

    Args:
        path: the file; its suffix picks the format (.xml .musicxml .mxl .krn .abc).
        skipped: where a multi-tune file keeps its good tunes and skips bad ones, the skipped
            tunes are counted here by reason (and logged).

    Raises:
        SourceError: reason "missing", "unsupported_format", "unparsable" or "empty" when the
            file yields no piece with notes.
    """
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise SourceError(
            path, "unsupported_format", f"suffix {path.suffix!r} not in {sorted(SUFFIXES)}"
        )
    if not path.is_file():
        raise SourceError(path, "missing", "no such file")
    if fmt == "abc":
        blocks = abc_tunes(path.read_text(encoding="utf-8", errors="replace"))
        if not blocks:
            raise SourceError(path, "empty", "no tune (no X: line)")
        if len(blocks) > 1:
            return _abc_opus(path, blocks, skipped)
    parsed = _parse(path, lambda: converter.parse(path, format=fmt, forceSource=True))
    if isinstance(parsed, stream.Opus):
        return [(str(k + 1), _require_notes(path, s)) for k, s in enumerate(parsed.scores)]
    return [("", _require_notes(path, _as_score(parsed)))]


def _abc_opus(
    path: Path, blocks: list[tuple[str, str]], skipped: Counter[str] | None
) -> list[tuple[str, stream.Score]]:
    # One tune at a time: it costs what parsing the whole opus costs (~20-50 ms a tune), and a
    # bad tune then costs only itself instead of the hundreds of tunes beside it.
    pieces: list[tuple[str, stream.Score]] = []
    for name, block in blocks:
        try:
            pieces.append((name, abc_tune_score(f"{path}#{name}", block)))
        except SourceError as err:
            log.warning("skipping tune %s", err)
            if skipped is not None:
                skipped[err.reason] += 1
    if not pieces:
        raise SourceError(path, "empty", "no tune with notes could be parsed")
    return pieces


def abc_tune_score(where: str, block: str) -> stream.Score:
    """Parse one ABC tune (its text from `X:` on); `where` names it in errors.

    Raises:
        SourceError: reason "unparsable" or "empty".
    """
    with _without_beaming():
        parsed = _parse(where, lambda: converter.parse(block, format="abc", forceSource=True))
    return _require_notes(where, _as_score(parsed))


@contextlib.contextmanager
def _without_beaming() -> Iterator[None]:
    """music21's ABC import ends by computing beams (`makeBeams`), ~60% of its time, and has
    no option to skip it. Beams are engraving hints the canonical text never carries
    (LilyPond beams by itself), so they are skipped while a tune is parsed: the systems come
    out the same (tests/score/test_convert.py checks it)."""
    original = stream.Stream.makeBeams
    stream.Stream.makeBeams = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        stream.Stream.makeBeams = original  # type: ignore[method-assign]


def _parse(where: Path | str, parse: Callable[[], stream.Stream]) -> stream.Stream:
    try:
        return parse()
    except Exception as exc:  # music21 raises many unrelated types on bad input
        raise SourceError(where, "unparsable", f"{type(exc).__name__}: {exc}") from exc


def _as_score(parsed: stream.Stream) -> stream.Score:
    if isinstance(parsed, stream.Score):
        return parsed
    score = stream.Score()
    score.insert(0, parsed)
    return score


def _require_notes(where: Path | str, score: stream.Score) -> stream.Score:
    if not score.parts or not any(p.recurse().notes for p in score.parts):
        raise SourceError(where, "empty", "no notes")
    return score


# ---------------------------------------------------------------------------------------------
# Measures to bars


@dataclass(frozen=True)
class _State:
    """What is in force at a point: clef token, key as (tonic, mode), time as a string."""

    clef: str
    key: tuple[str, str]
    time: str


@dataclass
class _Event:
    text: str  # a note, rest or chord without its tie
    pitches: frozenset[tuple[int, int]]
    tie: bool  # tied to the next event in the source


@dataclass
class _Bar:
    """One measure (or two merged halves) as items: _Event, or a raw token (`\\tuplet 3/2 {`)."""

    items: list[_Event | str]
    length: Fraction  # whole notes
    start: _State
    end: _State  # differs from start when the clef changes inside the bar
    measure: Fraction  # the time signature's bar length
    error: str | None = None
    changed: bool = False  # a clef, key or time element opens this measure


@dataclass
class _Reader:
    """Reads one part's measures in order, carrying clef, key and time from measure to measure."""

    counts: Counter[str]
    state: _State
    time_ok: bool = True
    key_ok: bool = True
    # ids of the time signatures seen so far in this part (their objects live in the score)
    seen_times: set[int] = field(default_factory=set)
    restored_time: bool = False  # the last measure read restated an earlier time object

    def read(self, m: stream.Measure) -> _Bar:
        before = self.state
        self.restored_time = False
        try:
            elements = self.elements(m)
            self.start_changes(elements)
            start = self.state
            items, length, end_clef = self.events(elements)
            end = _replace(start, clef=end_clef)
            error = None
        except _Drop as drop:
            error, items, length, start, end = drop.reason, [], Fraction(0), self.state, self.state
        if error is None:
            error = self.state_error()
        bar_len = _time_length(self.state.time) if error is None else Fraction(0)
        return _Bar(items, length, start, end, bar_len, error, start != before)

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
            raise _Drop("multi_voice")
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
                self.state = _replace(self.state, clef=_clef_token(el))
            elif isinstance(el, key.KeySignature):
                if off != 0:
                    raise _Drop("mid_bar_change")
                self.key_ok, k = _key_args(el)
                self.state = _replace(self.state, key=k)
            elif isinstance(el, meter.TimeSignature):
                if off != 0:
                    raise _Drop("mid_bar_change")
                self.time_ok = _time_supported(el)
                self.state = _replace(self.state, time=f"{el.numerator}/{el.denominator}")
                # music21's ABC reader splits an overfull bar into a full one and a fragment
                # with an invented time signature, then puts the earlier time signature
                # object itself back on the next bar: that object identity gives it away.
                self.restored_time = id(el) in self.seen_times
                self.seen_times.add(id(el))

    def events(
        self, elements: list[tuple[Fraction, object]]
    ) -> tuple[list[_Event | str], Fraction, str]:
        """Notes, rests, chords, tuplet brackets and mid-bar clefs of one measure.

        Returns the items, their length, and the clef in force after the last item (a clef
        after the last note is not an item: it opens the next bar, through `self.state`).
        """
        out = _BarBuilder(self.state.clef)
        for off, el in elements:
            if isinstance(el, harmony.Harmony):
                self.counts["chord_symbol_removed"] += 1
            elif isinstance(el, note.GeneralNote):
                if el.duration.isGrace or el.duration.quarterLength == 0:
                    self.counts["grace_note_removed"] += 1
                    continue
                if off / 4 != out.pos:
                    raise _Drop("offset_gap" if off / 4 > out.pos else "overlap")
                out.add(el)
            elif isinstance(el, clef.Clef) and off > 0:
                token = _clef_token(el)
                if token != self.state.clef:
                    self.state = _replace(self.state, clef=token)
                    if not token:
                        raise _Drop("unsupported_clef")
                    out.clef(token)
        items = out.finish()
        return items, out.pos, out.clef_at_end


def _replace(state: _State, **changes: object) -> _State:
    return _State(**{**state.__dict__, **changes})


def _clef_token(c: clef.Clef) -> str:
    """The canonical clef token, or "" for a clef the grammar lacks (percussion, tab...).

    An unsupported clef stays in force (as "") until a supported one replaces it, so every bar
    written in it is dropped, not engraved in the clef before it.
    """
    return _CLEF_TOKENS.get((c.sign, c.line, c.octaveChange or 0), "")


def _key_args(ks: key.KeySignature) -> tuple[bool, tuple[str, str]]:
    """(supported, (tonic, mode)); modes other than minor take the major key of the signature."""
    sharps = ks.sharps
    if getattr(ks, "isNonTraditional", False) or sharps is None or abs(sharps) > 7:
        return False, ("c", "major")
    if isinstance(ks, key.Key) and ks.mode == "minor":
        return True, (MINOR_TONICS[sharps + 7], "minor")
    return True, (MAJOR_TONICS[sharps + 7], "major")


def _time_supported(ts: meter.TimeSignature) -> bool:
    return 1 <= ts.numerator <= MAX_TIME_NUMERATOR and ts.denominator in DURATION_BASES


def _time_length(time: str) -> Fraction:
    num, den = time.split("/")
    return Fraction(int(num), int(den))


def _pitch(p) -> str:
    """Canonical absolute pitch of a music21 Pitch (written as music21 holds it)."""
    alter = p.accidental.alter if p.accidental is not None else 0
    if alter != int(alter) or abs(alter) > 2:
        raise _Drop("unsupported_accidental")
    octave = p.octave if p.octave is not None else p.implicitOctave
    if not -MAX_DOWN_OCTAVES <= octave - 3 <= MAX_UP_OCTAVES:
        raise _Drop("pitch_range")
    return pitch_name(p.step.lower(), int(alter), octave)


class _BarBuilder:
    """A measure's events; opens and closes `\\tuplet` groups as music21 marks them."""

    def __init__(self, start_clef: str) -> None:
        self.start_clef = start_clef
        self.clef_at_end = start_clef  # the clef in force after the last kept item
        self.items: list[_Event | str] = []
        self.pos = Fraction(0)  # whole notes from the bar start
        self.group: tuple[str, Fraction, Fraction] | None = None  # (ratio, filled, full length)

    def add(self, el: note.GeneralNote) -> None:
        pitches = _event_pitches(el)
        tied = _is_tied(el)
        length = Fraction(el.duration.quarterLength) / 4
        tuplets = el.duration.tuplets
        if len(tuplets) > 1:
            raise _Drop("nested_tuplet")
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
            raise _Drop("unsupported_duration")
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

    def finish(self) -> list[_Event | str]:
        self.close_group()
        # A clef after the last note applies to the next bar; the caller's state carries it.
        while self.items and _is_clef(self.items[-1]):
            self.items.pop()
        clefs = [it for it in self.items if _is_clef(it)]
        self.clef_at_end = clefs[-1].split(" ", 1)[1] if clefs else self.start_clef
        return self.items


def _is_clef(item: _Event | str) -> bool:
    return isinstance(item, str) and item.startswith("\\clef ")


def _event_pitches(el: note.GeneralNote) -> list[str]:
    """Sorted distinct pitches of a note or chord; [] for a rest."""
    if isinstance(el, note.Rest):
        return []
    if isinstance(el, note.Note):
        return [_pitch(el.pitch)]
    if isinstance(el, chord.Chord):
        return sorted({_pitch(p) for p in el.pitches}, key=pitch_order)
    raise _Drop("unpitched")


def _is_tied(el: note.GeneralNote) -> bool:
    ties = [el.tie] + ([n.tie for n in el.notes] if isinstance(el, chord.Chord) else [])
    return any(t is not None and t.type in ("start", "continue") for t in ties)


def _event(pitches: list[str], dur: str, tie: bool) -> _Event:
    if not pitches:
        return _Event(f"r{dur}", frozenset(), False)
    text = f"{pitches[0]}{dur}" if len(pitches) == 1 else f"<{' '.join(pitches)}>{dur}"
    return _Event(text, frozenset(pitch_order(p) for p in pitches), tie)


def _tuplet_ratio(tup, mult: Fraction) -> str:
    """`N/M` for `\\tuplet`: music21's own numbers when they agree with the multiplier."""
    actual, normal = tup.numberNotesActual, tup.numberNotesNormal
    if actual and normal and Fraction(normal, actual) == mult:
        num, den = actual, normal
    else:
        num, den = mult.denominator, mult.numerator
    if num == den or max(num, den) > MAX_TUPLET_NUMBER:
        raise _Drop("unsupported_tuplet")
    return f"{num}/{den}"


def _split_duration(length: Fraction) -> list[str]:
    """Duration tokens summing to `length`, longest first (tied when a note needs several)."""
    if length <= 0:
        raise _Drop("unsupported_duration")
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
        raise _Drop("unsupported_duration")
    return parts


def _longest_fitting(rest: Fraction, base: int) -> str:
    for dots in ("..", ".", ""):
        tok = f"{base}{dots}"
        if duration_value(tok) <= rest:
            return tok
    raise AssertionError("unreachable: rest >= 1/base")


# ---------------------------------------------------------------------------------------------
# Parts to systems


def systems_from_score(
    score: stream.Score, piece: str, bars_per_system: int
) -> tuple[list[System], Counter[str]]:
    """Cut every part of `score` into systems of `bars_per_system` measures of canonical text.

    All systems carry `piece` (one work, one id, so splits by piece keep a work together) and
    are numbered over the parts in score order, then the systems of each part. A pickup bar
    does not count towards `bars_per_system`; the last system of a part may be shorter.

    Returns:
        The systems, and counts by reason of dropped systems and of removed events (keys
        ending in `_removed` or `_merged` count events, the others whole systems; see
        docs/canonical-lilypond.md).
    """
    if bars_per_system < 1:
        raise ValueError(f"bars_per_system must be >= 1, got {bars_per_system}")
    counts: Counter[str] = Counter()
    systems: list[System] = []
    for part in score.parts:
        for text in _part_texts(part, bars_per_system, counts):
            systems.append(System(text, piece, len(systems)))
    return systems, counts


def _part_texts(part: stream.Part, bars_per_system: int, counts: Counter[str]) -> list[str]:
    measures = list(part.getElementsByClass(stream.Measure))
    if not measures:
        counts["no_measures"] += 1
        return []
    if part.atSoundingPitch is True and _transposes(part):
        # Written pitch is what the engraved part shows; MusicXML stores it, other sources may not.
        part = part.toWrittenPitch(inPlace=False)
        measures = list(part.getElementsByClass(stream.Measure))
    reader = _Reader(counts, _State(_initial_clef(part, measures[0], counts), ("c", "major"), ""))
    bars = []
    for m in measures:
        bars.append(reader.read(m))
        if reader.restored_time and len(bars) > 1 and bars[-2].error is None:
            bars[-2].error = "overfull_measure"  # the fragment of a bar music21 split
    while bars and bars[-1].error is None and not bars[-1].items:
        bars.pop()  # ABC and MusicXML often end with an empty measure after the final barline
    bars, partial = _fit_lengths(bars, counts)
    texts: list[str] = []
    for k, chunk in enumerate(_chunks(bars, bars_per_system, partial is not None)):
        bad = next((b.error for b in chunk if b.error), None)
        if bad is not None:
            counts[bad] += 1
            continue
        text = _render(chunk, partial if k == 0 else None, counts)
        if _checked(text, counts):
            texts.append(text)
    return texts


def _checked(text: str, counts: Counter[str]) -> bool:
    """The last guard before an image is made: a text the grammar rejects is a converter bug."""
    try:
        validate(text)
    except CanonicalError as err:
        log.error("converter bug, system dropped (please report): %s\n%s", err, text)
        counts["invalid_text"] += 1
        return False
    return True


def _transposes(part: stream.Part) -> bool:
    """True when an instrument of the part sounds other than written (toWrittenPitch copies it)."""
    return any(
        i.transposition is not None and i.transposition.semitones != 0
        for i in part.recurse().getElementsByClass(instrument.Instrument)
    )


def _initial_clef(part: stream.Part, first: stream.Measure, counts: Counter[str]) -> str:
    """The first measure's clef; else music21's best guess from the pitches (counted)."""
    found = (
        first.getElementsByClass(clef.Clef).first() or part.getElementsByClass(clef.Clef).first()
    )
    if found is None:
        counts["clef_inferred"] += 1
        found = clef.bestClef(part, recurse=True)
    return _clef_token(found)


def _fit_lengths(bars: list[_Bar], counts: Counter[str]) -> tuple[list[_Bar], Fraction | None]:
    """Make every bar a whole measure: merge split halves, keep a pickup and a short last bar.

    Returns the bars (with `error` set on those that cannot agree with a bar check) and the
    pickup length when the first bar is one.
    """
    out: list[_Bar] = []
    partial = None
    i = 0
    while i < len(bars):
        bar = bars[i]
        nxt = bars[i + 1] if i + 1 < len(bars) else None
        if bar.error is None and bar.length != bar.measure:
            if nxt is not None and _mergeable(bar, nxt):
                out.append(_merge(bar, nxt))
                counts["split_measure_merged"] += 1
                i += 2
                continue
            if i == 0 and 0 < bar.length < bar.measure and _partial_ok(bar.length):
                partial = bar.length
            elif not (nxt is None and 0 < bar.length < bar.measure):
                bar.error = _length_error(bar)
        out.append(bar)
        i += 1
    return out, partial


def _partial_ok(length: Fraction) -> bool:
    try:
        partial_token(length)
    except ValueError:  # a pickup needing a unit below 1/64 (a dotted 64th, say)
        return False
    return True


def _length_error(bar: _Bar) -> str:
    if bar.length == 0:
        return "empty_measure"
    return "incomplete_measure" if bar.length < bar.measure else "overfull_measure"


def _mergeable(a: _Bar, b: _Bar) -> bool:
    """Two short halves of one measure (split around a repeat sign, say) that fill it exactly."""
    return (
        b.error is None
        and not b.changed
        and a.measure == b.measure
        and 0 < a.length < a.measure
        and 0 < b.length < b.measure
        and a.length + b.length == a.measure
    )


def _merge(a: _Bar, b: _Bar) -> _Bar:
    return _Bar(a.items + b.items, a.length + b.length, a.start, b.end, a.measure)


def _chunks(bars: list[_Bar], n: int, pickup: bool) -> list[list[_Bar]]:
    first = n + 1 if pickup else n
    chunks = [bars[:first]]
    chunks += [bars[k : k + n] for k in range(first, len(bars), n)]
    return [c for c in chunks if c]


def _render(chunk: list[_Bar], partial: Fraction | None, counts: Counter[str]) -> str:
    head = chunk[0].start
    tokens = [f"\\clef {head.clef}", f"\\key {head.key[0]} \\{head.key[1]}", f"\\time {head.time}"]
    if partial is not None:
        tokens.append(f"\\partial {partial_token(partial)}")
    items: list[_Event | str] = []
    for k, bar in enumerate(chunk):
        if k:
            items.append("|")
            items.extend(_change_tokens(chunk[k - 1].end, bar.start))
        items.extend(bar.items)
    return " ".join(tokens + _resolve_ties(items, counts))


def _change_tokens(before: _State, after: _State) -> list[str]:
    out = []
    if after.clef != before.clef:
        out.append(f"\\clef {after.clef}")
    if after.key != before.key:
        out.append(f"\\key {after.key[0]} \\{after.key[1]}")
    if after.time != before.time:
        out.append(f"\\time {after.time}")
    return out


def _resolve_ties(items: list[_Event | str], counts: Counter[str]) -> list[str]:
    """Render items; keep a tie only where LilyPond can draw it (the next event shares a pitch).

    A tie into the next system is dropped silently: LilyPond draws nothing for a tie at the
    end of a score, so the text must not claim one. A tie to a different pitch (ABC's `-`
    between two notes) is counted.
    """
    events = [k for k, it in enumerate(items) if isinstance(it, _Event)]
    following = dict(zip(events, events[1:], strict=False))
    out: list[str] = []
    for k, it in enumerate(items):
        if isinstance(it, str):
            out.append(it)
            continue
        nxt = following.get(k)
        tie = it.tie and nxt is not None and bool(it.pitches & items[nxt].pitches)
        if it.tie and nxt is not None and not tie:
            counts["broken_tie_removed"] += 1
        out.append(it.text + ("~" if tie else ""))
    return out
