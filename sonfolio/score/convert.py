"""Music21 scores to canonical LilyPond systems: each part cut into systems of whole bars.

A file becomes scores in sonfolio.score.parse; a part's measures become bars in
sonfolio.score.measures, whose events (notes, rests, chords, tuplets) sonfolio.score.notes
writes; here the bars are fitted to whole measures, cut into systems and rendered.

Every emitted text passes `canonical.validate`, whose bar arithmetic is LilyPond's: a system
that would compile with a bar-check warning is dropped and counted instead, so an image never
disagrees with its text. docs/canonical-lilypond.md lists what is dropped and why.

Pitches are written pitch (as engraved for the player, what MusicXML stores); a part that
music21 holds at sounding pitch is transposed back to written pitch first.
"""

from __future__ import annotations

import logging
from collections import Counter
from fractions import Fraction

from music21 import clef, instrument, stream

from sonfolio.score.canonical import CanonicalError, System, partial_token, validate
from sonfolio.score.measures import Bar, Reader, State, clef_token
from sonfolio.score.notes import Event

log = logging.getLogger(__name__)


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
        for text, time, bar in _part_texts(part, bars_per_system, counts):
            systems.append(System(text, piece, len(systems), time, bar))
    return systems, counts


def _part_texts(
    part: stream.Part, bars_per_system: int, counts: Counter[str]
) -> list[tuple[str, str | None, int]]:
    """(text, time in force when its header prints none, first bar's number) per system."""
    measures = list(part.getElementsByClass(stream.Measure))
    if not measures:
        counts["no_measures"] += 1
        return []
    if part.atSoundingPitch is True and _transposes(part):
        # Written pitch is what the engraved part shows; MusicXML stores it, other sources may not.
        part = part.toWrittenPitch(inPlace=False)
        measures = list(part.getElementsByClass(stream.Measure))
    reader = Reader(counts, State(_initial_clef(part, measures[0], counts), ("c", "major"), ""))
    bars = []
    for m in measures:
        bars.append(reader.read(m))
        if reader.restored_time and len(bars) > 1 and bars[-2].error is None:
            bars[-2].error = "overfull_measure"  # the fragment of a bar music21 split
    while bars and bars[-1].error is None and not bars[-1].items:
        bars.pop()  # ABC and MusicXML often end with an empty measure after the final barline
    bars, partial = _fit_lengths(bars, counts)
    texts: list[tuple[str, str | None, int]] = []
    start = 0  # index of the chunk's first bar in `bars`
    for k, chunk in enumerate(_chunks(bars, bars_per_system, partial is not None)):
        first, start = start, start + len(chunk)
        bad = next((b.error for b in chunk if b.error), None)
        if bad is not None:
            counts[bad] += 1
            continue
        # LilyPond prints a time signature where a piece starts and where it changes; a line
        # that starts under the time in force prints none
        before = bars[first - 1].end.time if first else None
        time = before if before == chunk[0].start.time else None
        text = _render(chunk, partial if k == 0 else None, counts, time is None)
        # LilyPond numbers bars from 1, a pickup bar being bar 0
        number = first if partial is not None else first + 1
        if _checked(text, time, counts):
            texts.append((text, time, number))
    return texts


def _checked(text: str, time: str | None, counts: Counter[str]) -> bool:
    """The last guard before an image is made: a text the grammar rejects is a converter bug."""
    try:
        validate(text, time)
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
    return clef_token(found)


def _fit_lengths(bars: list[Bar], counts: Counter[str]) -> tuple[list[Bar], Fraction | None]:
    """Make every bar a whole measure: merge split halves, keep a pickup and a short last bar.

    Returns the bars (with `error` set on those that cannot agree with a bar check) and the
    pickup length when the first bar is one.
    """
    out: list[Bar] = []
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


def _length_error(bar: Bar) -> str:
    if bar.length == 0:
        return "empty_measure"
    return "incomplete_measure" if bar.length < bar.measure else "overfull_measure"


def _mergeable(a: Bar, b: Bar) -> bool:
    """Two short halves of one measure (split around a repeat sign, say) that fill it exactly."""
    return (
        b.error is None
        and not b.changed
        and a.measure == b.measure
        and 0 < a.length < a.measure
        and 0 < b.length < b.measure
        and a.length + b.length == a.measure
    )


def _merge(a: Bar, b: Bar) -> Bar:
    return Bar(a.items + b.items, a.length + b.length, a.start, b.end, a.measure)


def _chunks(bars: list[Bar], n: int, pickup: bool) -> list[list[Bar]]:
    first = n + 1 if pickup else n
    chunks = [bars[:first]]
    chunks += [bars[k : k + n] for k in range(first, len(bars), n)]
    return [c for c in chunks if c]


def _render(
    chunk: list[Bar], partial: Fraction | None, counts: Counter[str], print_time: bool
) -> str:
    head = chunk[0].start
    tokens = [f"\\clef {head.clef}", f"\\key {head.key[0]} \\{head.key[1]}"]
    if print_time:
        tokens.append(f"\\time {head.time}")
    if partial is not None:
        tokens.append(f"\\partial {partial_token(partial)}")
    items: list[Event | str] = []
    for k, bar in enumerate(chunk):
        if k:
            items.append("|")
            items.extend(_change_tokens(chunk[k - 1].end, bar.start))
        items.extend(bar.items)
    return " ".join(tokens + _resolve_ties(items, counts))


def _change_tokens(before: State, after: State) -> list[str]:
    out = []
    if after.clef != before.clef:
        out.append(f"\\clef {after.clef}")
    if after.key != before.key:
        out.append(f"\\key {after.key[0]} \\{after.key[1]}")
    if after.time != before.time:
        out.append(f"\\time {after.time}")
    return out


def _resolve_ties(items: list[Event | str], counts: Counter[str]) -> list[str]:
    """Render items; keep a tie only where LilyPond can draw it (the next event shares a pitch).

    A tie into the next system is dropped silently: LilyPond draws nothing for a tie at the
    end of a score, so the text must not claim one. A tie to a different pitch (ABC's `-`
    between two notes) is counted.
    """
    events = [k for k, it in enumerate(items) if isinstance(it, Event)]
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
