"""The canonical grammar's parser's positions and the token parses it caches: the modes (what
may come next), the order of changes and markings, and a note, a rest, a pitch, a time
signature and a pickup read (sonfolio.score.common.token_state reads them; the decoders'
prefix tables, sonfolio.score.decode.tables, are built over the same modes)."""

from __future__ import annotations

import functools
from fractions import Fraction

from sonfolio.score.common import lexicon as lx
from sonfolio.score.common import refusals as no

# What may come next (the parser's position). H*: the header; C*: a change's arguments.
(
    HCLEF_CMD,
    HCLEF,
    HKEY_CMD,
    HTONIC,
    HMODE,
    AFTER_KEY,
    HTIME,
    AFTER_TIME,
    HPARTIAL,
    BODY,
    CCLEF,
    CTONIC,
    CMODE,
    CTIME,
    RATIO,
    OPEN,
    TUP,
    CHORD,
    START,
    HBAR,
    BAR,
    AFTER_BAR,
    GOPEN,
    GRACE,
    GCHORD,
    AFTER_GRACE,
) = range(26)
# START: the body's first token after a \partial (a `\bar ".|:"` may open it); HBAR, BAR: the
# type of a header or in-body `\bar`; AFTER_BAR: the `|` a mid-text `\bar` stands before;
# GOPEN, GRACE, GCHORD: a grace group's `{`, its notes and `}`, a chord in it; AFTER_GRACE: the
# note or chord a grace group ornaments.

# The header's modes, and those of the key and time a change states (read alike).
HEADER = frozenset(
    (HCLEF_CMD, HCLEF, HKEY_CMD, HTONIC, HMODE, HTIME, HPARTIAL, CTONIC, CMODE, CTIME)
)

# What a text that ends in a mode lacks (the modes where it may end, or where more is named,
# have none): "text ends early; expected a clef".
EXPECTS = {
    HCLEF_CMD: repr("\\clef"),
    HCLEF: "a clef",
    HKEY_CMD: repr("\\key"),
    HTONIC: "a key tonic",
    HMODE: "\\major",
    HTIME: "a time signature N/D",
    HPARTIAL: "a pickup length",
    HBAR: "a bar line type",
    BAR: "a bar line type",
    CCLEF: "a clef",
    CTONIC: "a key tonic",
    CMODE: "\\major",
    CTIME: "a time signature N/D",
    RATIO: "a tuplet ratio N/M",
    OPEN: repr("{"),
    GOPEN: repr("{"),
    TUP: repr("}"),
    GRACE: repr("}"),
}

ORDER = {cmd: i for i, cmd in enumerate(lx.CHANGE_ORDER)}  # \clef 0, \key 1, \time 2
MARK_RANK = lx.MARK_RANK  # a marking's place in the order after an event
FERMATA = "\\fermata"  # the one marking a rest takes
BAR_TYPES, BAR_ENDS = frozenset(lx.BAR_TYPES), frozenset(lx.BAR_END_TYPES)
BAR_STARTS = frozenset(lx.BAR_START_TYPES)
SHORTEST = min(lx.duration_value(d) for d in lx.DURATIONS)  # 1/64: the shortest event


@functools.lru_cache(maxsize=65536)
def event_of(tok: str) -> tuple[frozenset, Fraction, bool] | None:
    """A note or rest token -> (pitches, length, tied); None when it is neither."""
    if (m := lx.NOTE.fullmatch(tok)) is not None:
        return (
            frozenset((lx.pitch_order(m.group(1)),)),
            lx.dur_value(m.group(2), m.group(3)),
            bool(m.group(4)),
        )
    if (m := lx.REST.fullmatch(tok)) is not None:
        return frozenset(), lx.dur_value(m.group(1), m.group(2)), False
    return None


@functools.lru_cache(maxsize=4096)
def pitch_key(name: str) -> tuple[int, int] | None:
    return lx.pitch_order(name) if lx.PITCH.fullmatch(name) is not None else None


@functools.lru_cache(maxsize=1024)
def time_length(tok: str) -> Fraction | None:
    """A time signature token's measure (`6/8`: 3/4); None: not a time signature."""
    m = lx.FRACTION.fullmatch(tok)
    if m is None or int(m.group(1)) > lx.MAX_TIME_NUMERATOR:
        return None
    if int(m.group(2)) not in lx.DURATION_BASES:
        return None
    return Fraction(int(m.group(1)), int(m.group(2)))


def time_measure(time: str) -> Fraction:
    """The length of a measure of time signature `time` ("6/8" -> 3/4).

    Raises:
        ValueError: `time` is not N/D with N <= 32 and D a power of two up to 64.
    """
    measure = time_length(time)
    if measure is None:
        raise ValueError(
            f"not a time signature: {time!r}; write N/D with N <= {lx.MAX_TIME_NUMERATOR} and "
            f"D one of {lx.DURATION_BASES}"
        )
    return measure


def partial_length(tok: str, measure: Fraction) -> Fraction | no.Why:
    """A \\partial argument's length, or why it is refused."""
    m = lx.PARTIAL.fullmatch(tok)
    if m is None:
        return no.PICKUP_FORM
    length = lx.dur_value(m.group(1), m.group(2)) * int(m.group(3) or 1) / int(m.group(4) or 1)
    try:
        if lx.partial_token(length) != tok:
            return no.PICKUP_NOT_CANONICAL
    except ValueError:
        return no.PICKUP_UNWRITABLE
    return length if length < measure else no.PICKUP_LONG
