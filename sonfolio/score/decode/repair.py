"""A greedy reading the canonical grammar refuses, made valid by the fewest local edits, token
by token: a short bar filled (its last event lengthened, else rests), a missed bar line
written, an overflowing event shortened, a pitch without duration given the one before; and
the same reading under each other printed meter (`meter_refits`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from fractions import Fraction

from sonfolio.score.common import canonical as cn
from sonfolio.score.common import lexicon as lx
from sonfolio.score.common.modes import AFTER_BAR, BODY, time_length
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
    a `\\partial` without its length takes its bar's (`_pickup_lengths`),
    `\\bar` with no type becomes `|`, anything else refused is dropped; at the end a slur left
    open is closed on the last event (or its start dropped), a tie left pending dropped. None:
    nothing valid came of it."""
    toks = _pickup_lengths(text.split())
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


def _pickup_lengths(toks: list[str]) -> list[str]:
    """`\\partial` read without its length (`\\partial cis''8 d''8 |`, as the model writes it
    where the pickup's small digits escape it) given the length of the events before the first
    bar line, when one duration token holds it; else the events are kept and the `\\partial`
    dropped (a short first bar is then filled as any other)."""
    if "\\partial" not in toks:
        return toks
    k = toks.index("\\partial")
    if k + 1 < len(toks) and lx.PARTIAL.fullmatch(toks[k + 1]):
        return toks
    total = Fraction(0)
    for tok in toks[k + 1 :]:
        if tok == "|":
            break
        if (event := _event_end(tok)) is not None:
            total += lx.duration_value(event[1])
        elif tok in lx.MARK_RANK or tok.startswith("<"):
            continue  # a marking; a chord's first pitches (its end holds the duration)
        else:
            total = Fraction(0)  # a tuplet, a grace group, a change: not a plain sum
            break
    length = lx.duration_token(total) if total else None
    return [*toks[: k + 1], length, *toks[k + 1 :]] if length else toks[:k] + toks[k + 1 :]


def meter_refits(text: str, time: str | None) -> Iterator[str]:
    """`text` (a greedy reading the grammar refuses) with the time signature its header prints
    replaced by each of the lexicon's whose measure one of its whole bars fills (`_bar_sums`),
    where it then validates or `repair` makes it valid. A misread meter (Verovio's 2/2 read as
    3/8) makes the grammar hold every bar to the wrong length, and the repair or the search
    under it cuts each bar short; the caller keeps whichever reading the CTC head makes
    likelier, so the printed meter changes only where the notes' own bars outweigh the frames
    that read it. Where `\\time` was read before no meter (`\\time \\bar ...`), the header
    without it is offered too."""
    toks = text.split()
    printed = cn.header_time(" ".join(toks))
    if printed is None:
        return
    printed_measure = time_length(printed)  # None: `\\time` read before no meter at all
    # whole bars: not the last (unfinished, maybe), nor the first where a pickup is printed
    inner = _bar_sums(toks)[1 if "\\partial" in toks else 0 : -1]
    measures = {m for m in inner if m is not None and m != printed_measure}
    alternatives = [
        [*toks[:6], meter, *toks[7:]] for meter in lx.TIMES if time_length(meter) in measures
    ]
    if printed_measure is None:  # or the header without it, read in the time in force
        alternatives.append(toks[:5] + toks[7:])
    for alt in map(" ".join, alternatives):
        if cn.is_canonical(alt, time):
            yield alt
            continue
        fixed = repair(alt, time)
        if fixed is not None and cn.header_time(fixed) == cn.header_time(alt):
            yield fixed


def _bar_sums(toks: list[str]) -> list[Fraction | None]:
    """The length of each stretch between bar lines, as the events read say (a tuplet's scaled,
    grace notes left out); None for one the sum cannot be trusted in (a tuplet's ratio
    unreadable)."""
    sums: list[Fraction | None] = []
    total: Fraction | None = Fraction(0)
    scale, grace = Fraction(1), False
    for k, tok in enumerate(toks):
        if tok == "|":
            sums.append(total)
            total = Fraction(0)
        elif tok in lx.GRACES:
            grace = True
        elif tok == "\\tuplet":
            ratio = time_length(toks[k + 1]) if k + 1 < len(toks) else None
            scale = 1 / ratio if ratio else scale
            total = total if ratio else None
        elif tok == "}":
            scale, grace = Fraction(1), False
        elif (event := _event_end(tok)) is not None and not grace and total is not None:
            total += lx.duration_value(event[1]) * scale
    sums.append(total)
    return sums


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
