"""A greedy reading the canonical grammar refuses, made valid by the fewest local edits, token
by token: a short bar filled (its last event lengthened, else rests), a missed bar line
written, an overflowing event shortened, a pitch without duration given the one before."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from fractions import Fraction

from sonfolio.score.common import canonical as cn
from sonfolio.score.common import lexicon as lx
from sonfolio.score.common.modes import AFTER_BAR, BODY
from sonfolio.score.decode.state import State


def _event_end(tok: str) -> tuple[str, str, str] | None:
    """(head, duration, tie) of an event's last token (a note, a rest, a chord's end), by
    canonical's own patterns; None for any other token."""
    if m := lx.NOTE.fullmatch(tok):
        return m[1], m[2] + m[3], m[4]
    if m := lx.CHORD_END.fullmatch(tok):
        return m[1] + ">", m[2] + m[3], m[4]
    if m := lx.REST.fullmatch(tok):
        return "r", m[1] + m[2], ""
    return None


def repair(text: str, time: str | None) -> str | None:
    """A valid text made from `text` (a greedy reading the grammar refuses) by the fewest
    local edits, token by token: a bar the model left short is filled (its last event's
    duration lengthened, else rests), a bar line it missed is written, an event that
    overflows its bar is shortened to fit, a pitch without a duration takes the one before,
    `\\bar` with no type becomes `|`, anything else refused is dropped; at the end a slur left
    open is closed on the last event (or its start dropped), a tie left pending dropped. None:
    nothing valid came of it."""
    toks = text.split()
    out: list[str] = []
    states = [State.start(time)]  # states[k]: after out[:k], each token completed

    def push(*items: str) -> bool:
        mark = len(out)
        for tok in items:
            nxt = states[-1].feed(tok + " ")
            if nxt is None:
                del out[mark:], states[mark + 1 :]
                return False
            out.append(tok)
            states.append(nxt)
        return True

    def room() -> Fraction | None:
        s = states[-1]
        limit = s.room()
        if limit is None or s.tuplet is not None or s.mode not in (BODY, AFTER_BAR):
            return None
        return limit - s.bar

    def fill() -> bool:  # the bar's missing length, by lengthening its last event or rests
        left = room()
        if not left or left < 0:
            return False
        if out and (event := _event_end(out[-1])):
            head, dur, tie = event
            longer = lx.duration_token(lx.duration_value(dur) + left)
            if longer is not None:
                last, state = out.pop(), states.pop()
                if push(f"{head}{longer}{tie}"):
                    return True
                out.append(last)
                states.append(state)
        rests = _rests(left)
        return rests is not None and push(*rests)

    last_dur = "4"
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok == "\\bar" and not (i + 1 < len(toks) and toks[i + 1].startswith('"')):
            tok = "|"  # the model writes \bar where a plain bar line stands
        i += 1
        event = _event_end(tok)
        if push(tok):
            if event:
                last_dur = event[1]
            continue
        if tok == "|":
            if fill():
                push("|")
            continue
        if lx.PITCH.fullmatch(tok) and push(tok + last_dur):  # read without its duration
            continue
        if event is None:
            continue  # refused and not an event: dropped
        if room() == 0 and push("|"):  # a missed bar line
            i -= 1
            continue
        left = room()
        if left and left > 0 and (fits := lx.duration_token(left)) is not None:
            push(f"{event[0]}{fits}{event[2]}")  # shortened to what the bar holds
    for candidate in _endings(out):
        if cn.is_canonical(candidate, time):
            return candidate
    for k in range(len(out) - 1, 0, -1):  # cut back to the last complete point
        end = states[k - 1].feed(out[k - 1])  # its last token left open, as a text ends
        if end is not None and end.complete:
            return " ".join(out[:k])
    return None


def _endings(out: list[str]) -> Iterator[str]:
    """The text as read, then with what it left open closed or dropped."""
    text = " ".join(out)
    yield text
    yield text + " )"
    if "(" in out:
        k = len(out) - 1 - out[::-1].index("(")
        yield " ".join(out[:k] + out[k + 1 :])
    if out and out[-1].endswith("~"):
        yield " ".join([*out[:-1], out[-1][:-1]])


@functools.cache
def _longest_first() -> tuple[tuple[Fraction, str], ...]:
    return tuple(sorted(((lx.duration_value(t), t) for t in lx.DURATIONS), reverse=True))


def _rests(length: Fraction) -> list[str] | None:
    """Rests that add up to `length`, longest first; None where none can."""
    out = []
    for value, tok in _longest_first():
        while value <= length:
            out.append(f"r{tok}")
            length -= value
    return out if length == 0 else None
