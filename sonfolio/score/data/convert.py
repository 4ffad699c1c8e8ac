"""Music21 scores to canonical LilyPond systems: each part cut into systems of whole bars.

A file becomes scores in sonfolio.score.data.parse; a part's measures become bars in
sonfolio.score.data.measures, whose events (notes, rests, chords, tuplets) sonfolio.score.data.notes
writes; here the bars are fitted to whole measures, cut into systems and rendered.

Every emitted text passes `canonical.validate`, whose bar arithmetic is LilyPond's: a system
that would compile with a bar-check warning is dropped and counted instead, so an image never
disagrees with its text. docs/canonical-lilypond.md lists what is dropped and why.

Pitches are written pitch (as engraved for the player, what MusicXML stores); a part that
music21 holds at sounding pitch is transposed back to written pitch first.

Markings (canonical format 3): articulations, dynamics and grace notes are read with the
notes (sonfolio.score.data.notes, .measures); slurs and bar lines span bars, so they are placed
here, once the part's bars are cut into systems: a slur must start and end in one system
(one slur at a time), and a repeat at a line break is written where the line prints it.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from fractions import Fraction

from music21 import clef, expressions, instrument, spanner, stream

from sonfolio.score.common.canonical import CanonicalError, System, validate
from sonfolio.score.common.lexicon import partial_token
from sonfolio.score.data.measures import Bar, Reader, State, clef_token
from sonfolio.score.data.notes import Event

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
    slurs, trill_starts = _spanner_ends(part)
    reader = Reader(counts, State(_initial_clef(part, measures[0], counts), ("c", "major"), ""))
    reader.trill_starts = trill_starts
    bars = []
    for m in measures:
        bars.append(reader.read(m))
        if reader.restored_time and len(bars) > 1 and bars[-2].error is None:
            bars[-2].error = "overfull_measure"  # the fragment of a bar music21 split
    while bars and bars[-1].error is None and not bars[-1].items:
        # ABC and MusicXML often end with an empty measure after the final barline
        gone = bars.pop()
        if bars:
            bars[-1].right |= gone.left | gone.right
    bars, partial = _fit_lengths(bars, counts)
    lines = _bar_lines(bars)
    chunks = _chunks(bars, bars_per_system, partial is not None)
    good = [not any(b.error for b in chunk) for chunk in chunks]
    _place_slurs(chunks, good, slurs, counts)
    texts: list[tuple[str, str | None, int]] = []
    start = 0  # index of the chunk's first bar in `bars`
    for k, chunk in enumerate(chunks):
        first, start = start, start + len(chunk)
        if not good[k]:
            counts[next(b.error for b in chunk if b.error)] += 1
            continue
        # LilyPond prints a time signature where a piece starts and where it changes; a line
        # that starts under the time in force prints none
        before = bars[first - 1].end.time if first else None
        time = before if before == chunk[0].start.time else None
        ends = _system_bar_lines(bars, lines, first, len(chunk))
        text = _render(chunk, partial if k == 0 else None, counts, time is None, ends)
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


def _spanner_ends(part: stream.Part) -> tuple[list[tuple[int, int]], frozenset[int]]:
    """The part's slurs as (id of first, id of last element), and the ids of the notes a
    trill extension line starts on: read once per part (MusicXML and ABC keep spanners on the
    part), so no note searches the spanners."""
    slurs, trills = [], set()
    for sp in part.spanners:
        if isinstance(sp, spanner.Slur):
            first, last = sp.getFirst(), sp.getLast()
            if first is not None and last is not None:
                slurs.append((id(first), id(last)))
        elif isinstance(sp, expressions.TrillExtension):
            first = sp.getFirst()
            if first is not None:
                trills.add(id(first))
    return slurs, frozenset(trills)


def _place_slurs(
    chunks: list[list[Bar]], good: list[bool], slurs: list[tuple[int, int]], counts: Counter[str]
) -> None:
    """Mark the events where the kept slurs start and end.

    A slur is kept when both its ends are events of one emitted system, on two different
    events, and no slur kept before it is still open there (`) (` on one event is fine);
    the others are counted: `slur_across_systems_removed`, `slur_unplaced_removed` (an end on
    a note that was not kept: a dropped grace note, a dropped bar), `slur_single_event_removed`,
    `slur_on_rest_removed` (an end on a rest: the grammar slurs notes and chords),
    `slur_overlap_removed` (nested or overlapping).
    """
    if not slurs:
        return
    where: dict[int, tuple[int, int, Event]] = {}  # element id -> (chunk, event index, event)
    for c, chunk in enumerate(chunks):
        seq = 0
        for bar in chunk:
            for it in bar.items:
                if isinstance(it, Event):
                    for source in it.sources:
                        where[source] = (c, seq, it)
                    seq += 1
    by_chunk: defaultdict[int, list[tuple[int, int, Event, Event]]] = defaultdict(list)
    for first, last in slurs:
        a, b = where.get(first), where.get(last)
        if a is None or b is None:
            if (a is not None and good[a[0]]) or (b is not None and good[b[0]]):
                counts["slur_unplaced_removed"] += 1
            continue
        if a[0] != b[0]:
            if good[a[0]] or good[b[0]]:
                counts["slur_across_systems_removed"] += 1
            continue
        if not good[a[0]]:
            continue
        if a[1] > b[1]:
            a, b = b, a
        if a[1] == b[1]:
            counts["slur_single_event_removed"] += 1
            continue
        if not a[2].pitches or not b[2].pitches:  # a slur marks notes and chords, never a rest
            counts["slur_on_rest_removed"] += 1
            continue
        by_chunk[a[0]].append((a[1], b[1], a[2], b[2]))
    for found in by_chunk.values():
        open_until = -1  # index of the event where the last kept slur ends
        for start, end, first_event, last_event in sorted(found, key=lambda s: (s[0], s[1])):
            if start < open_until:
                counts["slur_overlap_removed"] += 1
                continue
            first_event.slur_start = last_event.slur_end = True
            open_until = end


_START, _END, _BOTH, _DOUBLE, _FINAL = '".|:"', '":|."', '":..:"', '"||"', '"|."'


def _bar_lines(bars: list[Bar]) -> list[tuple[str | None, bool]]:
    """The bar line after each bar, as (what closes the bar: an end repeat, a final or a double
    bar, or None; whether a start repeat opens the next): the kinds at the end of a bar and at
    the start of the next, combined."""
    out = []
    for k, bar in enumerate(bars):
        kinds = bar.right | (bars[k + 1].left if k + 1 < len(bars) else frozenset())
        if "end" in kinds:
            close = _END
        elif "final" in kinds:
            close = _FINAL
        elif "double" in kinds:
            close = _DOUBLE
        else:
            close = None
        out.append((close, "start" in kinds))
    return out


def _system_bar_lines(
    bars: list[Bar], lines: list[tuple[str | None, bool]], first: int, n: int
) -> tuple[bool, list[str | None]]:
    """What a system of bars `first` to `first + n - 1` writes: whether it opens with a start
    repeat, and the `\\bar` type after each of its bars (None: a plain bar line).

    Between two bars of the system the line is one type (an end and a start repeat make
    `":..:"`; a start repeat outranks a double or final bar). As a page prints them, a line
    break splits it: the end repeat, double or final bar closes one line, the start repeat
    opens the next (so `":..:"` at a break is `":|."` then `".|:"`)."""
    opens = "start" in bars[0].left if first == 0 else lines[first - 1][1]
    inside: list[str | None] = []
    for close, start in lines[first : first + n - 1]:
        if start:
            inside.append(_BOTH if close == _END else _START)
        else:
            inside.append(close)
    inside.append(lines[first + n - 1][0])
    return opens, inside


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
                out.append(_merge(bar, nxt, counts))
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


def _merge(a: Bar, b: Bar, counts: Counter[str]) -> Bar:
    if a.right or b.left:  # a bar line inside a bar: the grammar has none
        counts["barline_mid_bar_removed"] += 1
    merged = Bar(a.items + b.items, a.length + b.length, a.start, b.end, a.measure)
    merged.left, merged.right = a.left, b.right
    return merged


def _chunks(bars: list[Bar], n: int, pickup: bool) -> list[list[Bar]]:
    first = n + 1 if pickup else n
    chunks = [bars[:first]]
    chunks += [bars[k : k + n] for k in range(first, len(bars), n)]
    return [c for c in chunks if c]


def _render(
    chunk: list[Bar],
    partial: Fraction | None,
    counts: Counter[str],
    print_time: bool,
    bar_lines: tuple[bool, list[str | None]],
) -> str:
    head = chunk[0].start
    tokens = [f"\\clef {head.clef}", f"\\key {head.key[0]} \\{head.key[1]}"]
    if print_time:
        tokens.append(f"\\time {head.time}")
    if partial is not None:
        tokens.append(f"\\partial {partial_token(partial)}")
    opens, lines = bar_lines
    if opens:
        tokens.append(f"\\bar {_START}")
    items: list[Event | str] = []
    for k, bar in enumerate(chunk):
        if k:
            if lines[k - 1] is not None:
                items.append(f"\\bar {lines[k - 1]}")
            items.append("|")
            items.extend(_change_tokens(chunk[k - 1].end, bar.start))
        items.extend(bar.items)
    if lines[-1] is not None:
        items.append(f"\\bar {lines[-1]}")
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
    between two notes) is counted. A grace group is not an event: a tie passes over it to
    the note it ornaments.
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
        out.append(it.render(tie))
    return out
