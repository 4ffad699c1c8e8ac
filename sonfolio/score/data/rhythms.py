"""Rhythms the default collections lack, written into train systems of real music:
eighth-note triplets (score_data.triplets) and dotted pairs (score_data.dotted); and the
meter they print least, cut time (score_data.cut_time).

The collections the default trains on (Bach chorales, Essen folk songs, a few quartets) hold
almost no tuplets and half the fiddle tunes' share of dotted eighths, while fiddle tunes, the
held-out collection's kind of music, are full of both: trained so, the model read none of
the 76 held-out systems with a triplet, and wrote 170 of the held-out systems' 411 dotted
eighths (eval@score of fresh-clone runs, 2026-11-28 and -29; the constrained decoder then
makes such a bar add up with wrong lengths elsewhere). Both rewrite a beat of two plain
eighths, `d'8 fis'8`, as a player would: the triplet `\\tuplet 3/2 { d'8 e'8 fis'8 }` (the
middle note: `middle`), or the dotted pair `d'8. fis'16` (a hornpipe's or a march's lilt).
The beat keeps its length, so the bars still add up; the result must pass the canonical
grammar, else the system stays as it was.

Only whole bars (their events adding up to the meter) of simple meters (x/4), only two plain
eighths starting on a beat, with no tie into the first and nothing on either (no tie, mark,
slur or dynamic), so the music stays plausible. The data stage applies them to train systems
only: val, test and held-out texts are never touched.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from fractions import Fraction

from sonfolio.score.common import canonical as cn
from sonfolio.score.common.lexicon import (
    CHORD_END,
    GRACES,
    NOTE,
    PITCH,
    REST,
    STEPS,
    dur_value,
    pitch_name,
    pitch_order,
)
from sonfolio.score.data.melody import key_alterations

_EIGHTH = re.compile(rf"({PITCH.pattern})8")  # a plain eighth: no dots, no tie
_SIMPLE_TIME = re.compile(r"([1-9][0-9]?)/4")
_BEAT = Fraction(1, 4)
# a token that starts the next event: the eighth before it carries nothing of its own (a bar's
# last eighth is followed by nothing: bars are split at `|`)
_NEXT_EVENT = re.compile(rf"r[0-9]|<|{PITCH.pattern}[0-9]")
# commands that change the lengths of what follows, or the meter: a bar holding one is left
_LENGTH_COMMANDS = ("\\tuplet", "\\time", "\\partial", *GRACES)


def _is_event(tok: str) -> bool:
    return bool(NOTE.fullmatch(tok) or REST.fullmatch(tok)) or tok.startswith("<")


def middle(first: str, last: str, alterations: dict[str, int]) -> str:
    """The triplet's middle note: a step from `first` towards `last` where they are a third
    or more apart (a passing note), `first` again where they are a step apart, the step above
    where they are the same (a neighbour); spelt as the key (`alterations`: step ->
    alteration) spells that step."""
    here, there = pitch_order(first)[0], pitch_order(last)[0]
    gap = there - here
    position = here + (1 if gap == 0 else 0 if abs(gap) == 1 else (1 if gap > 0 else -1))
    step = STEPS[position % 7]
    return pitch_name(step, alterations.get(step, 0), position // 7)


def _beats(bar: list[str], length: Fraction) -> list[int]:
    """Indices in `bar` of the first eighth of each beat made of two plain eighths; none when
    the bar is not whole (`length`) or holds a command that changes lengths."""
    if any(tok in _LENGTH_COMMANDS or tok in ("{", "}") for tok in bar):
        return []
    onset, found, chord, tied = Fraction(0), [], False, False
    for i, tok in enumerate(bar):
        if chord or tok.startswith("<"):
            end = CHORD_END.fullmatch(tok)
            chord = end is None
            if end:
                onset += dur_value(end.group(2), end.group(3))
                tied = tok.endswith("~")
            continue
        note, rest = NOTE.fullmatch(tok), REST.fullmatch(tok)
        if note is None and rest is None:
            continue  # a marking or a clef: no length
        if (
            note is not None
            and not tied  # a note tied into keeps its place
            and onset % _BEAT == 0
            and _EIGHTH.fullmatch(tok)
            and i + 1 < len(bar)
            and _EIGHTH.fullmatch(bar[i + 1])
            and (i + 2 == len(bar) or _NEXT_EVENT.match(bar[i + 2]))
        ):
            found.append(i)
        onset += dur_value(note.group(2), note.group(3)) if note else dur_value(*rest.groups())
        tied = tok.endswith("~")
    return found if onset == length else []


def with_triplets(
    text: str, time: str | None, rng: random.Random, per_beat: float = 0.5
) -> str | None:
    """`text` with beats of two plain eighths made eighth triplets (each such beat with
    probability `per_beat`, at least one), or None where none can be: no simple meter, no such
    beat, or a result the grammar refuses. `time`: the time in force when the header prints
    none."""

    def triplet(first: str, last: str, alterations: dict[str, int]) -> list[str]:
        inner = middle(first[:-1], last[:-1], alterations) + "8"
        return ["\\tuplet", "3/2", "{", first, inner, last, "}"]

    return _rewrite(text, time, rng, per_beat, triplet)


def with_dotted(
    text: str, time: str | None, rng: random.Random, per_beat: float = 0.5
) -> str | None:
    """`text` with beats of two plain eighths made a dotted eighth and a sixteenth (each such
    beat with probability `per_beat`, at least one); None as `with_triplets`."""
    return _rewrite(text, time, rng, per_beat, lambda a, b, _: [a + ".", b[:-1] + "16"])


def _rewrite(
    text: str,
    time: str | None,
    rng: random.Random,
    per_beat: float,
    make: Callable[[str, str, dict[str, int]], list[str]],
) -> str | None:
    """`text` with chosen beats of two plain eighths replaced by `make(first, last, the key's
    alterations)`, or None where no beat qualifies or the grammar refuses the result."""
    tokens = text.split(" ")
    meter = _SIMPLE_TIME.fullmatch(cn.header_time(text) or time or "")
    start = next((i for i, tok in enumerate(tokens) if _is_event(tok)), None)
    if meter is None or start is None:
        return None
    length = Fraction(int(meter.group(1)), 4)
    key = cn.header_key(text)
    alterations = key_alterations(key) if key else {}
    bars: list[list[str]] = [[]]
    for tok in tokens[start:]:
        if tok == "|":
            bars.append([])
        else:
            bars[-1].append(tok)
    candidates = [(b, i) for b, bar in enumerate(bars) for i in _beats(bar, length)]
    if not candidates:
        return None
    chosen = [c for c in candidates if rng.random() < per_beat] or [rng.choice(candidates)]
    for b, i in sorted(chosen, reverse=True):
        bar = bars[b]
        bar[i : i + 2] = make(bar[i], bar[i + 1], alterations)
    out = " ".join([*tokens[:start], " | ".join(" ".join(bar) for bar in bars)])
    return out if cn.is_canonical(out, time) else None


_FOUR_FOUR = "\\time 4/4"


def with_cut_time(text: str, time: str | None, rng: random.Random) -> str | None:
    """`text` with a printed `\\time 4/4` written `\\time 2/2` (cut time, alla breve: the same
    bar length, so every bar still adds up; the engravers draw it as a struck C or as 2/2);
    None where the system prints no 4/4. The train systems that print a meter print it on 25
    of 1,954 (1.3 %), the held-out Irish tunes on 23 of 104 (22 %), and a model that had hardly
    seen it read Verovio's cut time as 3/8, after which the grammar held every bar of the page to
    3/8 (docs/training.md, "Cut time"). `time` and `rng`: as the other rewrites take them."""
    del time, rng  # the meter printed is the one changed; nothing is drawn
    if f" {_FOUR_FOUR} " not in f" {text} ":
        return None
    out = f" {text} ".replace(f" {_FOUR_FOUR} ", " \\time 2/2 ", 1).strip()
    return out if cn.is_canonical(out) else None
