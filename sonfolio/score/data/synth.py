"""Synthetic canonical systems: what real corpora rarely hold, drawn from a seeded generator.

Folk tunes and chorales give few clefs, keys and rhythms; this fills the gaps: every clef in
`CLEFS`, all 15 key signatures (music in 30 major and minor keys, written by signature), many
time signatures, dense rhythms (16ths, 32nds, dots, ties,
tuplets), beamed runs of 16ths and 32nds that climb onto ledger lines, chords, rests,
accidentals beyond the key, pickups, and clef, key and time changes inside a system; and every
marking of canonical format 3: articulations (often a whole bar of staccato, accents or
tenuto), a dynamic every few bars, slurs over 2-8 notes, rare fermatas and trills, grace
notes now and then, repeat, double and final bar lines. Every text passes `canonical.validate`
(checked here).

Systems come in pieces of `SYSTEMS_PER_PIECE` that share a clef, key and time and continue
each other, so a split by piece keeps a piece's systems together. As on a page, only a piece's
first system prints the time signature; the others carry it as `System.time` (and their first
bar's number as `System.bar`, which the render prints above them). Piece k uses its own random
stream (`f"{seed}/{k}"`), so `synth_systems(n, seed, b)` is a prefix of a larger `n`'s output.
"""

from __future__ import annotations

import functools
import logging
import random
from dataclasses import dataclass, field
from fractions import Fraction

from sonfolio.score.common.canonical import System, validate
from sonfolio.score.common.lexicon import (
    ARTICULATIONS,
    CLEFS,
    KEYS,
    MAJOR_TONICS,
    MAX_GRACE_EVENTS,
    MINOR_TONICS,
    TIMES,
    duration_token,
    marking_tokens,
    partial_token,
    symbols,
)
from sonfolio.score.data.melody import BOTTOM_LINE, HIGHEST, LOWEST, next_pitches, spell

log = logging.getLogger(__name__)

# The keys the music is written in: every major and minor key signature (the text writes the
# signature alone, as the major key with it: see `_key_text`).
_MUSIC_KEYS: tuple[tuple[str, str], ...] = KEYS + tuple((t, "minor") for t in MINOR_TONICS)
SYSTEMS_PER_PIECE = 8
# How often each clef is drawn, as in printed parts: treble and bass most, then the C clefs of
# viola and cello parts and the guitar's octave treble; every other clef still comes once in
# every block of sum(weights) pieces (drawn evenly, the rare clefs took 9 pieces in 14: far more
# than printed music shows them)
_CLEF_WEIGHTS = {"treble": 8, "bass": 6, "alto": 3, "tenor": 2, '"treble_8"': 2}
_CLEF_DECK = tuple(c for c in CLEFS for _ in range(_CLEF_WEIGHTS.get(c, 1)))
# Rhythm patterns for one beat of length L, as fractions of L (written = sounding). Weights
# favour dense writing: the corpus already has plenty of quarters and eighths.
_SIMPLE_PATTERNS: tuple[tuple[int, tuple[Fraction, ...]], ...] = (
    (3, (Fraction(1),)),
    (4, (Fraction(1, 2), Fraction(1, 2))),
    (3, (Fraction(3, 4), Fraction(1, 4))),
    (2, (Fraction(1, 4), Fraction(3, 4))),
    (4, (Fraction(1, 4),) * 4),
    (3, (Fraction(1, 2), Fraction(1, 4), Fraction(1, 4))),
    (2, (Fraction(1, 4), Fraction(1, 4), Fraction(1, 2))),
    (2, (Fraction(1, 8),) * 8),
    (2, (Fraction(3, 8), Fraction(1, 8), Fraction(1, 4), Fraction(1, 4))),
    (1, (Fraction(7, 8), Fraction(1, 8))),
)
_COMPOUND_PATTERNS: tuple[tuple[int, tuple[Fraction, ...]], ...] = (
    (3, (Fraction(1),)),
    (4, (Fraction(2, 3), Fraction(1, 3))),
    (4, (Fraction(1, 3),) * 3),
    (3, (Fraction(1, 6),) * 6),
    (2, (Fraction(1, 2), Fraction(1, 6), Fraction(1, 3))),
    (2, (Fraction(1, 3), Fraction(1, 6), Fraction(1, 6), Fraction(1, 3))),
)
# Tuplets: (weight, ratio N/M, written note values as fractions of the beat L).
_SIMPLE_TUPLETS = (
    (4, "3/2", (Fraction(1, 2),) * 3),
    (2, "3/2", (Fraction(1), Fraction(1, 2))),
    (1, "3/2", (Fraction(1, 4),) * 6),
    (2, "5/4", (Fraction(1, 4),) * 5),
    (1, "6/4", (Fraction(1, 4),) * 6),
    (1, "7/4", (Fraction(1, 8),) * 7),
)
_COMPOUND_TUPLETS = (
    (3, "2/3", (Fraction(1, 3),) * 2),
    (1, "4/3", (Fraction(1, 3),) * 4),
)


# Markings (canonical format 3), at rates meant to look like printed parts.
_ARTICULATION_ORDER = {a: k for k, a in enumerate(ARTICULATIONS)}
# per bar: no style, or most of its notes staccato, tenuto or accented (a run of them)
_BAR_STYLES = ((75, None), (13, "-."), (6, "--"), (6, "->"))
_STYLE_SHARE = 0.85  # notes of a styled bar that carry its articulation
_SPORADIC = 0.05  # any other note: one articulation now and then
_SPORADIC_MARKS = ((6, "-."), (4, "->"), (3, "--"), (2, "-^"), (1, "\\trill"))
_FERMATA = 0.002  # any event (a rest too)
_END_FERMATA = 0.3  # a piece's last event
_DYNAMIC_BAR = 0.12  # bars whose first note gets a dynamic
_DYNAMICS = (
    (1, "\\ppp"), (3, "\\pp"), (5, "\\p"), (4, "\\mp"), (5, "\\mf"), (5, "\\f"), (3, "\\ff"),
    (2, "\\fff"), (1, "\\fp"), (1, "\\sf"), (1, "\\sfp"), (2, "\\sfz"), (1, "\\fz"),
    (1, "\\rfz"),
)  # fmt: skip
_ACCENT_DYNAMIC = 0.008  # a lone \\sfz or \\fp on any note
_SLUR = 0.1  # chance that a note with no slur open starts one (over 2-8 events)
_GRACE = 0.02  # plain notes (not in a tuplet, not a tie's end) ornamented by grace notes
# A system stops taking bars once it holds this many symbols (median of the real sources' 4-bar
# systems: about 25; the CTC head reads at most 80 tokens)
_LINE_SYMBOLS = 36
_RUN = 0.06  # a beat that starts a run of 16ths or 32nds (1 to 4 beats long)
# bar lines: after the header, between bars, at a system's end, at a piece's end
_OPEN_REPEAT = 0.08
_INNER_BAR = 0.03
_INNER_BARS = ((3, '":|."'), (2, '".|:"'), (2, '":..:"'), (3, '"||"'), (1, '"|."'))
_END_BAR = 0.12
_END_BARS = ((3, '":|."'), (2, '"||"'), (1, '"|."'))
_LAST_BARS = ((6, '"|."'), (2, '":|."'), (2, None))


@dataclass
class Note:
    length: str  # duration token
    pitches: list[str]  # spelled pitch names, ascending; [] for a rest
    tie: bool = False
    marks: list[str] = field(default_factory=list)  # articulations, fermata, trill
    dynamic: str | None = None
    slur_start: bool = False
    slur_end: bool = False
    graces: str | None = None  # a grace group written right before the note
    attack: bool = True  # False for the end of a tie (no articulation, no dynamic)


@dataclass
class Piece:
    """The state a piece's systems share and carry from one system to the next."""

    rng: random.Random
    clef: str
    key: tuple[str, str]
    time: str
    height: int = 0  # diatonic index of the melody's current pitch
    tie_next: list[str] | None = None  # pitches the next event must repeat (a tie)
    style: str | None = None  # the current bar's articulation (a bar of staccato...)
    run: int = 0  # direction of the run of short notes being written (+1 up, -1 down)
    run_left: Fraction = Fraction(0)  # how much of that run is still to come
    run_note: Fraction = Fraction(0)  # its note value
    dynamic: str | None = None  # the last dynamic written

    def set_clef(self, clef: str) -> None:
        self.clef = clef
        self.height = BOTTOM_LINE[clef] + 4  # the middle line


def synth_systems(n: int, seed: int, bars_per_system: int) -> list[System]:
    """`n` synthetic systems of `bars_per_system` bars, the same for the same seed.

    Pieces are "synthetic/00000", "synthetic/00001", ... of `SYSTEMS_PER_PIECE` systems each;
    each piece takes the next clef and key from shuffled cycles, so the first `len(KEYS)`
    pieces (240 systems) hold every key, and every block of `len(_CLEF_DECK)` pieces every
    clef, the common ones more often (`_CLEF_WEIGHTS`).
    """
    if n < 0 or bars_per_system < 1:
        raise ValueError(f"need n >= 0 and bars_per_system >= 1, got {n}, {bars_per_system}")
    systems: list[System] = []
    k = 0
    while len(systems) < n:
        count = min(SYSTEMS_PER_PIECE, n - len(systems))
        piece = f"synthetic/{k:05d}"
        for i, (text, time, bar) in enumerate(_piece_texts(k, seed, count, bars_per_system)):
            validate(text, time)  # a generator bug must fail loudly here, never reach an image
            systems.append(System(text, piece, i, time, bar))
        k += 1
    log.info("made %d synthetic systems in %d pieces (seed %d)", len(systems), k, seed)
    return systems


def _cycled(items: tuple, seed: int, name: str, k: int):
    """Item k of an endless run of shuffled copies of `items`: each copy covers them all."""
    order = list(items)
    random.Random(f"{seed}/{name}/{k // len(items)}").shuffle(order)
    return order[k % len(items)]


def _piece_texts(k: int, seed: int, count: int, bars: int) -> list[tuple[str, str | None, int]]:
    """(text, time in force when the header prints none, first bar's number) per system."""
    rng = random.Random(f"{seed}/{k}")
    piece = Piece(rng, "", _cycled(_MUSIC_KEYS, seed, "key", k), rng.choice(TIMES))
    piece.set_clef(_cycled(_CLEF_DECK, seed, "clef", k))
    out: list[tuple[str, str | None, int]] = []
    number = 1  # LilyPond's bar number: a pickup bar is bar 0
    for i in range(count):
        pickup = i == 0 and rng.random() < 0.4
        last = i == SYSTEMS_PER_PIECE - 1  # the piece's last line (not `count`'s: prefixes)
        short_end = last and rng.random() < 0.4
        time = None if i == 0 else piece.time
        text, written = _system(piece, bars, pickup, short_end, time is None, last)
        out.append((text, time, number))
        number += written
    return out


def _key_text(key: tuple[str, str]) -> str:
    """`\\key P \\major`: the major key with `key`'s signature (canonical format 2)."""
    sharps = (MAJOR_TONICS if key[1] == "major" else MINOR_TONICS).index(key[0]) - 7
    return f"\\key {MAJOR_TONICS[sharps + 7]} \\major"


def _system(
    piece: Piece, bars: int, pickup: bool, short_end: bool, print_time: bool, last: bool
) -> tuple[str, int]:
    """One system's text and how many bars it holds: `bars`, or fewer where the music is
    dense (a page's line holds fewer bars of 32nds than of quarters, and the model reads a
    system in `_LINE_SYMBOLS`-ish symbols: its CTC head has one column per 8 px)."""
    rng = piece.rng
    head = [f"\\clef {piece.clef}", _key_text(piece.key)]
    if print_time:
        head.append(f"\\time {piece.time}")
    items: list[Note | str] = []
    if pickup:
        length = _pickup_length(piece)
        head.append(f"\\partial {partial_token(length)}")
        items += _bar(piece, length)
    if rng.random() < _OPEN_REPEAT:
        head.append('\\bar ".|:"')  # a line that opens a repeated section
    for b in range(bars):
        if items:
            if rng.random() < _INNER_BAR:
                items.append(f"\\bar {_weighted(rng, _INNER_BARS)[1]}")
            items.append("|")
            items += _bar_changes(piece)
        measure = _time_value(piece.time)
        length = _short_length(piece) if short_end and b == bars - 1 else measure
        items += _bar(piece, length)
        if b < bars - 1 and len(symbols(" ".join(_render(items)))) >= _LINE_SYMBOLS:
            bars = b + 1  # dense: the line ends here
            break
    piece.run_left = Fraction(0)  # a run ends with its line
    notes = [it for it in items if isinstance(it, Note)]
    if last and rng.random() < _END_FERMATA and "\\fermata" not in notes[-1].marks:
        notes[-1].marks.append("\\fermata")
    _slurs(piece, notes)
    end = _weighted(rng, _LAST_BARS)[1] if last else None
    if not last and rng.random() < _END_BAR:
        end = _weighted(rng, _END_BARS)[1]
    if end is not None:
        items.append(f"\\bar {end}")
    return " ".join(head + _render(items)), bars


def _slurs(piece: Piece, notes: list[Note]) -> None:
    """Slurs over 2-8 events, one at a time, each from a note or chord to a later one of the
    line (a slur may end where the next begins)."""
    rng = piece.rng
    i = 0
    while i < len(notes) - 1:
        if notes[i].pitches and rng.random() < _SLUR:
            j = min(i + rng.randint(1, 7), len(notes) - 1)
            while j > i and not notes[j].pitches:
                j -= 1
            if j > i:
                notes[i].slur_start = notes[j].slur_end = True
                i = j  # the last note may start the next slur
                continue
        i += 1


def _time_value(time: str) -> Fraction:
    num, den = time.split("/")
    return Fraction(int(num), int(den))


def _beat(time: str) -> tuple[Fraction, bool]:
    """(beat length, compound). 6/8, 9/8, 12/8... beat in dotted values; 3/8, 5/8, 7/8 in
    quarters (plus an eighth), so that eighth-based meters are not all 32nds and 64ths."""
    num, den = (int(x) for x in time.split("/"))
    if num % 3 == 0 and num >= 6 and den >= 4:
        return Fraction(3, den), True
    return max(Fraction(1, den), Fraction(1, 4) if den <= 8 else Fraction(1, 8)), False


def _pickup_length(piece: Piece) -> Fraction:
    beat, _ = _beat(piece.time)
    measure = _time_value(piece.time)
    options = [c for c in (beat, beat / 2, beat / 3, 2 * beat) if c < measure and duration_token(c)]
    return piece.rng.choice(options)


def _short_length(piece: Piece) -> Fraction:
    """A final bar shorter than the measure (a piece that ends on a partial bar)."""
    beat, _ = _beat(piece.time)
    beats = int(_time_value(piece.time) / beat)
    if beats < 2:
        return _time_value(piece.time)
    return beat * piece.rng.randint(1, beats - 1)


def _bar_changes(piece: Piece) -> list[str]:
    """Occasional clef, key and time changes at a bar start, in the canonical order."""
    rng, out = piece.rng, []
    if rng.random() < 0.05:
        piece.set_clef(rng.choice([c for c in _CLEF_DECK if c != piece.clef]))
        out.append(f"\\clef {piece.clef}")
    if rng.random() < 0.05:
        old = _key_text(piece.key)
        piece.key = rng.choice([k for k in _MUSIC_KEYS if _key_text(k) != old])
        out.append(_key_text(piece.key))
    if rng.random() < 0.05:
        piece.time = rng.choice([t for t in TIMES if t != piece.time])
        out.append(f"\\time {piece.time}")
    return out


def _bar(piece: Piece, length: Fraction) -> list[Note | str]:
    """Events filling `length`: beats, sometimes merged, sometimes with a clef change between,
    sometimes runs of 16ths or 32nds; the bar's articulation style, maybe a dynamic."""
    beat, compound = _beat(piece.time)
    rng, items = piece.rng, []
    # Density per bar: the shortest value as a share of the beat. Dense bars are the point,
    # but a system of nothing else is slow to engrave and unreadable at image size.
    finest = rng.choices((Fraction(1, 2), Fraction(1, 4), Fraction(1, 8)), weights=(3, 4, 3))[0]
    piece.style = _weighted(rng, _BAR_STYLES)[1]
    left = length
    while left > 0:
        span = min(beat, left)
        if piece.run_left <= 0 and rng.random() < _RUN:
            piece.run_note = rng.choices((Fraction(1, 16), Fraction(1, 32)), weights=(3, 1))[0]
            piece.run = rng.choice((-1, 1))
            piece.run_left = beat * rng.randint(1, 4)
        run = _run(piece, span) if piece.run_left > 0 else []
        if not run:
            if left == length and rng.random() < 0.08 and duration_token(left):
                span = left  # one long value for the whole bar
            elif left >= 2 * beat and rng.random() < 0.2 and duration_token(2 * beat):
                span = 2 * beat
        if items and rng.random() < 0.015:
            piece.set_clef(rng.choice([c for c in _CLEF_DECK if c != piece.clef]))
            items.append(f"\\clef {piece.clef}")
        items += run or _span(piece, span, compound and span == beat, beat * finest)
        left -= span
    if rng.random() < _DYNAMIC_BAR:
        first = next((it for it in items if isinstance(it, Note) and it.attack), None)
        if first is not None and first.pitches:
            first.dynamic = _weighted(rng, [d for d in _DYNAMICS if d[1] != piece.dynamic])[1]
            piece.dynamic = first.dynamic
    return items


def _run(piece: Piece, span: Fraction) -> list[Note | str]:
    """A beat of the run in progress: equal short notes moving by step ([] where the beat is
    not a whole number of them, which ends the run)."""
    count = span / piece.run_note
    if count.denominator != 1 or not 2 <= count <= 12:
        piece.run_left = Fraction(0)
        return []
    token = duration_token(piece.run_note)
    notes: list[Note | str] = [_event(piece, token, run=True) for _ in range(int(count))]
    piece.run_left -= span
    return notes


def _span(piece: Piece, span: Fraction, compound: bool, finest: Fraction) -> list[Note | str]:
    """One beat (or a merged span) as plain notes or one tuplet, no value below `finest`."""
    rng = piece.rng
    # 64ths stay rare: they are legal, but a bar full of them is unreadable at image size.
    shortest = max(finest, Fraction(1, 64) if rng.random() < 0.1 else Fraction(1, 32))
    tuplets = [
        t for t in (_COMPOUND_TUPLETS if compound else _SIMPLE_TUPLETS) if _fits(span, t, shortest)
    ]
    if tuplets and rng.random() < 0.15:
        _, ratio, values = _weighted(rng, tuplets)
        notes = [_event(piece, duration_token(span * v)) for v in values]
        return [f"\\tuplet {ratio} {{", *notes, "}"]
    patterns = [
        p
        for p in (_COMPOUND_PATTERNS if compound else _SIMPLE_PATTERNS)
        if _fits(span, p, shortest)
    ]
    if not patterns:  # a span no pattern divides (a lone 64th): one value
        return [_event(piece, duration_token(span), grace=True)]
    values = _weighted(rng, patterns)[1]
    return [_event(piece, duration_token(span * v), grace=True) for v in values]


@functools.cache  # pure, and called ~130 times a system: Fraction arithmetic is slow
def _fits(span: Fraction, choice: tuple, shortest: Fraction) -> bool:
    """Every written value exists, none is below `shortest`, and they fill the span exactly."""
    values = choice[-1]
    if any(duration_token(span * v) is None or span * v < shortest for v in values):
        return False
    scale = Fraction(1)
    if len(choice) == 3:
        num, den = (int(x) for x in choice[1].split("/"))
        scale = Fraction(den, num)
    return sum(values) * scale == 1


def _weighted(rng: random.Random, choices: list) -> tuple:
    return rng.choices(choices, weights=[c[0] for c in choices])[0]


def _event(piece: Piece, length: str | None, run: bool = False, grace: bool = False) -> Note:
    """A note, chord or rest with its markings; `run`: a note of a run (by step, rarely a rest
    or chord); `grace`: grace notes may ornament it (not in a tuplet)."""
    assert length is not None  # guaranteed by _fits
    rng = piece.rng
    forced, piece.tie_next = piece.tie_next, None
    roll = rng.random()
    if roll < (0.02 if run else 0.12) and forced is None:
        rest = Note(length, [])
        if rng.random() < _FERMATA:
            rest.marks.append("\\fermata")
        return rest
    pitches = forced or next_pitches(piece, chord=roll > (0.98 if run else 0.86), run=run)
    tie = rng.random() < (0.02 if run else 0.1)
    if tie:
        piece.tie_next = pitches
    note = Note(length, pitches, tie, attack=forced is None)
    if note.attack:
        _articulate(piece, note)
        if grace and rng.random() < _GRACE:
            note.graces = _graces(piece)
    return note


def _articulate(piece: Piece, note: Note) -> None:
    """The bar's style on most notes, else an articulation now and then; rare fermatas and
    lone accents (\\sfz, \\fp)."""
    rng = piece.rng
    marks = set()
    if piece.style is not None and rng.random() < _STYLE_SHARE:
        marks.add(piece.style)
    elif rng.random() < _SPORADIC:
        marks.add(_weighted(rng, _SPORADIC_MARKS)[1])
    if "-." in marks and rng.random() < 0.1:
        marks.add("->")
    if rng.random() < _FERMATA:
        marks.add("\\fermata")
    note.marks = sorted(marks, key=_ARTICULATION_ORDER.__getitem__)
    if rng.random() < _ACCENT_DYNAMIC:
        note.dynamic = rng.choice(("\\sfz", "\\fp", "\\sf", "\\fz"))


def _graces(piece: Piece) -> str:
    """1-4 grace notes leading to the note just drawn (`piece.height`): one slashed or plain
    note a step off, or a short scale into it; now and then a grace chord."""
    rng = piece.rng
    count = rng.choices(range(1, MAX_GRACE_EVENTS + 1), weights=(8, 4, 2, 1))[0]
    slashed = rng.random() < (0.6 if count == 1 else 0.1)
    length = rng.choice(("8", "16")) if count == 1 else rng.choice(("16", "16", "32"))
    if count == 1:
        heights = [piece.height + rng.choice((-1, 1, 1, 2))]
    else:
        way = rng.choice((-1, 1))
        heights = [piece.height - way * (count - k) for k in range(count)]
    events = []
    for h in heights:
        h = max(LOWEST, min(HIGHEST - 2, h))
        if rng.random() < 0.06:
            events.append(f"<{spell(piece, h)} {spell(piece, h + 2)}>{length}")
        else:
            events.append(f"{spell(piece, h)}{length}")
    command = "\\acciaccatura" if slashed else "\\grace"
    return " ".join([command, "{", *events, "}"])


def _render(items: list[Note | str]) -> list[str]:
    """Tokens; a tie stays only where the next event repeats the pitches (not a rest or the end).
    Each event is followed by its markings; its grace group goes before it."""
    out = []
    notes = [i for i, it in enumerate(items) if isinstance(it, Note)]
    following = dict(zip(notes, notes[1:], strict=False))
    for i, it in enumerate(items):
        if isinstance(it, str):
            out.append(it)
            continue
        if not it.pitches:
            out.append(f"r{it.length}")
            out += it.marks
            continue
        nxt = following.get(i)
        tie = it.tie and nxt is not None and items[nxt].pitches == it.pitches
        body = it.pitches[0] if len(it.pitches) == 1 else f"<{' '.join(it.pitches)}>"
        if it.graces is not None:
            out.append(it.graces)
        out.append(f"{body}{it.length}{'~' if tie else ''}")
        out += marking_tokens(it.marks, it.dynamic, it.slur_end, it.slur_start)
    return out
