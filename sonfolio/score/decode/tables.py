"""The canonical grammar's tokens as a decoder reads them a piece at a time: the table of every
prefix of the tokens a mode allows, with what it can still become (sonfolio.score.decode.state
reads them; the modes and the parses of a token are the parser's own,
sonfolio.score.common.modes)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction

from sonfolio.score.common import lexicon as lx
from sonfolio.score.common.modes import (
    AFTER_BAR,
    AFTER_GRACE,
    AFTER_KEY,
    AFTER_TIME,
    BAR,
    BODY,
    CCLEF,
    CHORD,
    CMODE,
    CTIME,
    CTONIC,
    GCHORD,
    GOPEN,
    GRACE,
    HBAR,
    HCLEF,
    HCLEF_CMD,
    HKEY_CMD,
    HMODE,
    HTIME,
    HTONIC,
    OPEN,
    RATIO,
    START,
    TUP,
    event_of,
    pitch_key,
)

# Prefixes of a \partial argument: D, D., D.., D*N, D*N/M (lexicon's PARTIAL), cut anywhere.
PARTIAL_PREFIX = re.compile(
    r"(?:3|6|(?:1|2|4|8|16|32|64)\.{0,2}(?:\*(?:[1-9][0-9]*(?:/(?:[1-9][0-9]*)?)?)?)?)?"
)


# A partial token with at most this many completions is checked exactly (each completion run
# through the parser): a few µs each, and it removes most dead ends a decoder could walk into.
_EXACT_BELOW = 64


@dataclass(frozen=True)
class _Lex:
    """What a partial token can still become, in one mode."""

    completions: tuple[str, ...] | None  # every token it can become, where there are few
    events_only: bool  # every completion is a note, rest or chord end
    min_len: Fraction | None  # the shortest of those events' lengths (whole notes)
    pitches: frozenset  # the pitch keys its completions hold (a pending tie needs one of them)


def _pitches() -> list[str]:
    marks = ["", *("'" * k for k in range(1, lx.MAX_UP_OCTAVES + 1))]
    marks += ["," * k for k in range(1, lx.MAX_DOWN_OCTAVES + 1)]
    return [s + a + m for s in lx.STEPS for a in lx.ALTER for m in marks]


def _table(tokens: dict[str, Fraction | None]) -> dict[str, _Lex]:
    """Every prefix ("" included) of `tokens` (token -> its event length, None: no event)."""
    info: dict[str, list] = {}  # prefix -> [completions, non-event, min length, pitches]
    for tok, length in tokens.items():
        pitch = _token_pitch(tok)
        for i in range(len(tok) + 1):
            e = info.setdefault(tok[:i], [[], False, None, set()])
            e[0].append(tok)
            e[3] |= pitch
            if length is None:
                e[1] = True
            else:
                e[2] = length if e[2] is None else min(e[2], length)
    return {
        p: _Lex(tuple(c) if len(c) <= _EXACT_BELOW else None, not other, m, frozenset(ps))
        for p, (c, other, m, ps) in info.items()
    }


def _token_pitch(tok: str) -> frozenset:
    """The pitch key a lexicon token holds (a note; a chord's start, pitch or end); none for
    rests and the rest."""
    key = pitch_key(tok.lstrip("<").split(">")[0])
    if key is None:
        ev = event_of(tok)
        return frozenset() if ev is None else ev[0]
    return frozenset((key,))


@functools.cache
def token_tables() -> dict[int, dict[str, _Lex]]:
    """Prefix tables per mode (built once: ~0.3 s; HPARTIAL uses PARTIAL_PREFIX instead)."""
    pitches = _pitches()
    durs = {d: lx.duration_value(d) for d in lx.DURATIONS}
    events: dict[str, Fraction | None] = {}
    for p in pitches:
        events["<" + p] = None  # a chord's first pitch: its length comes at its end
        for d, length in durs.items():
            events[p + d] = events[p + d + "~"] = length
    notes = {t: length for t, length in events.items() if not t.startswith("<")}
    events.update({"r" + d: length for d, length in durs.items()})
    marks = dict.fromkeys(lx.MARKINGS)
    body_tokens = {
        **events,
        "|": None,
        **dict.fromkeys(lx.CHANGE_ORDER),
        "\\tuplet": None,
        "\\bar": None,
        **dict.fromkeys(lx.GRACES),
        **marks,
    }
    body = _table(body_tokens)
    chord: dict[str, Fraction | None] = dict.fromkeys(pitches)
    grace_chord: dict[str, Fraction | None] = dict.fromkeys(pitches)
    for p in pitches:
        for d, length in durs.items():
            chord[p + ">" + d] = chord[p + ">" + d + "~"] = length
            grace_chord[p + ">" + d] = None  # grace notes last nothing and take no tie
    # a grace group's notes: untied, no length (a bar check skips them), no rests
    grace = {t: None for t in notes if not t.endswith("~")}
    grace.update({"<" + p: None for p in pitches})
    grace["}"] = None
    times = [f"{n}/{d}" for n in range(1, lx.MAX_TIME_NUMERATOR + 1) for d in lx.DURATION_BASES]
    top = lx.MAX_TUPLET_NUMBER + 1
    ratios = [f"{n}/{m}" for n in range(1, top) for m in range(1, top) if n != m]
    clefs, tonics = (
        _table(dict.fromkeys(lx.CLEFS)),
        _table(dict.fromkeys(lx.MAJOR_TONICS)),
    )
    major, time_table = _table({"\\major": None}), _table(dict.fromkeys(times))
    return {
        HCLEF_CMD: _table({"\\clef": None}),
        HCLEF: clefs,
        HKEY_CMD: _table({"\\key": None}),
        HTONIC: tonics,
        HMODE: major,
        AFTER_KEY: body,
        HTIME: time_table,
        AFTER_TIME: _table({**body_tokens, "\\partial": None}),
        BODY: body,
        CCLEF: clefs,
        CTONIC: tonics,
        CMODE: major,
        CTIME: time_table,
        RATIO: _table(dict.fromkeys(ratios)),
        OPEN: _table({"{": None}),
        TUP: _table({**events, "}": None, **marks}),
        CHORD: _table(chord),
        START: body,
        HBAR: _table(dict.fromkeys(lx.BAR_START_TYPES)),
        BAR: _table(dict.fromkeys(lx.BAR_TYPES)),
        AFTER_BAR: _table({"|": None}),
        GOPEN: _table({"{": None}),
        GRACE: _table(grace),
        GCHORD: _table(grace_chord),
        AFTER_GRACE: _table({**notes, **{"<" + p: None for p in pitches}}),
    }
