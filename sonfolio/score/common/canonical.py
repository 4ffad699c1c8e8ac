"""The canonical LilyPond grammar: one staff system per line, every token spelled one way.

A canonical text is what the score model reads and writes, and the only LilyPond text the
project ever compiles from a prediction: LilyPond input can run Scheme (`#(...)`, `$x`,
`\\include`), so `validate` accepts nothing outside this grammar. docs/canonical-lilypond.md
describes the format; in short::

    \\clef treble \\key g \\major \\time 3/4 \\partial 4 d'4 | g'4. a'8 b'4 | <d' fis' a'>2 r4

The text says what the image shows (format version 2): the clef and the key signature always
(a key by its signature: the major key with it, `\\key bes \\major` for G minor too, since no
image shows a mode), the time signature only where it is printed, which is a piece's first
system and a change. A system that prints none is read in the time in force before it, which
the caller passes as `time`; without one, the first full bar sets the measure.

The grammar has one parser, sonfolio.score.common.token_state.TokenState: the decoders run it
a piece at a time (sonfolio.score.decode.state.State), `validate` over a whole text
(`Reader`), naming its first refusal.

Tokens: sonfolio.score.common.lexicon. Lengths: `Fraction`s of a whole note (`4` is 1/4).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sonfolio.score.common import lexicon as lx
from sonfolio.score.common import refusals as no
from sonfolio.score.common.modes import pitch_key, time_measure
from sonfolio.score.common.token_state import TokenState

__all__ = [
    "CanonicalError",
    "Reader",
    "System",
    "bar_lengths",
    "header_time",
    "is_canonical",
    "read",
    "time_after",
    "time_measure",
    "validate",
]


class CanonicalError(ValueError):
    """A text breaks the canonical grammar; names the first offending token and its position."""

    def __init__(self, token: str, index: int, char: int, why: str) -> None:
        super().__init__(f"token {index} {token!r} (char {char}): {why}")
        self.token = token
        self.index = index  # 0-based index among the space-separated tokens
        self.char = char  # 0-based character offset of the token in the text
        self.why = why


@dataclass(frozen=True)
class System:
    """One staff system of canonical text.

    `piece` is the source work (all systems of one work share it, so splits by piece keep a
    work on one side); `index` numbers the systems within the piece, over its parts in order.
    `time` is the time signature in force before a system whose header prints none (None when
    it prints one); `bar` the number of its first bar, which a page prints above a system that
    does not open the piece.
    """

    text: str
    piece: str
    index: int
    time: str | None = None
    bar: int = 1


def is_canonical(text: str, time: str | None = None) -> bool:
    """True when `text` passes `validate` (with the time in force `time`)."""
    return bool(text) and _run(text, time, Reader)[3] is True


def validate(text: str, time: str | None = None) -> None:
    """Check that `text` is one canonical system; bar lengths must agree with the time signature.

    Args:
        text: one system.
        time: the time signature in force before the system (`"3/4"`), for a system whose
            header prints none (a continuation system). Ignored when the header states one.
            None with no `\\time` in the header: the first full bar sets the measure, and
            every later full bar must match it.

    Raises:
        CanonicalError: naming the first offending token, its index and character offset.
        ValueError: `time` is not a time signature N/D.
    """
    if not text:
        raise CanonicalError("", 0, 0, "empty text")
    _, error = read(text, time)
    if error is not None:
        raise error


def time_after(text: str, time: str | None = None) -> str | None:
    """The time signature in force at the end of a valid system (what the next system is read
    in); None when neither the system nor `time` ever stated one."""
    return _valid(text, time).time or None


def bar_lengths(text: str, time: str | None = None) -> list[Fraction]:
    """The length of each bar of a valid system, in whole notes (a pickup bar's included)."""
    return _valid(text, time).lengths


def header_key(text: str) -> tuple[str, str] | None:
    """The key a system's header prints (`\\key T \\major` right after the clef): (tonic,
    mode), if any."""
    toks = text.split(" ")
    return (toks[3], toks[4].lstrip("\\")) if len(toks) > 4 and toks[2] == "\\key" else None


def header_time(text: str) -> str | None:
    """The time signature a system's header prints (`\\time N/D` right after the key), if any."""
    toks = text.split(" ")
    return toks[6] if len(toks) > 6 and toks[5] == "\\time" else None


class Reader(TokenState):
    """The grammar's parser as `validate` runs it: a whole text, token by token (`take`, then
    `finish`), foreseeing no dead end (`prune` off: a bar that grows too long is named at its
    `|`, not at the note that overfills it), each bar's length kept in `lengths`."""

    __slots__ = ("lengths",)
    prune = False

    @classmethod
    def start(cls, time: str | None = None) -> Reader:
        s = super().start(time)
        s.lengths = []
        return s

    def bar_check(self) -> bool | no.Why:
        bar = self.bar
        why = super().bar_check()
        if why is True:
            self.lengths.append(bar)
        return why

    def finish(self) -> bool | no.Why:
        why = super().finish()
        if why is True:
            self.lengths.append(self.bar)
        return why


def read(
    text: str, time: str | None = None, reader: type[Reader] = Reader
) -> tuple[Reader, CanonicalError | None]:
    """Read `text` with `reader` up to its first fault: the reader as it stopped, and the error
    naming that fault (None: the text is valid).

    Raises:
        ValueError: `time` is not a time signature N/D.
    """
    state, toks, j, why = _run(text, time, reader)
    return state, None if why is True else _error(state, toks, j, why)


def _run(
    text: str, time: str | None, reader: type[Reader]
) -> tuple[Reader, list[str], int, bool | no.Why]:
    """(the reader, the tokens, the index of the token it refused (len: the end), True or
    the refusal)."""
    toks = text.split(" ")
    state = reader.start(time)
    take = state.take
    for j, tok in enumerate(toks):
        why = take(tok)
        if why is not True:
            return state, toks, j, why
    return state, toks, len(toks), state.finish()


def _valid(text: str, time: str | None) -> Reader:
    state, error = read(text, time)
    if error is not None:
        raise error
    return state


def _error(state: Reader, toks: list[str], j: int, why: no.Why) -> CanonicalError:
    """The error naming refusal `why` of token `j` (len(toks): the text's end)."""
    tok = toks[j] if j < len(toks) else "<end>"
    if j < len(toks) and not why.before_take and (fault := no.take_fault(tok)) is not None:
        return _at(toks, j, fault)  # no token at all: said before anything else
    if why.at is no.CHORD:
        start = j - len(state.chord)
        if why in no.CHORD_FAULTS:
            return _chord_error(toks, start)
        return _at(toks, start, why.text(state, tok))
    return _at(toks, j + why.at, why.text(state, tok))


def _chord_error(toks: list[str], start: int) -> CanonicalError:
    """A chord refused at one of its tokens, named as a whole: read to its end first (a token
    that is no token, or a text that ends, named as such), then its first name that is no
    pitch, else its order (the pitches the parser compared)."""
    end = start + 1
    while end < len(toks) and lx.CHORD_END.fullmatch(toks[end]) is None:
        if (fault := no.take_fault(toks[end])) is not None:
            return _at(toks, end, fault)
        end += 1
    if end == len(toks):
        return _at(toks, start, no.UNCLOSED.says)
    names = [toks[start][1:], *toks[start + 1 : end], toks[end].split(">")[0]]
    for k, name in enumerate(names):
        if pitch_key(name) is None:
            return _at(toks, start + k, f"not a pitch inside a chord: {name!r}")
    return _at(toks, start, no.CHORD_ORDER.says)


def _at(toks: list[str], i: int, why: str) -> CanonicalError:
    """The error naming token `i` (len(toks): "<end>", just past the text)."""
    char = sum(len(t) + 1 for t in toks[:i])
    if i >= len(toks):
        return CanonicalError("<end>", len(toks), char - 1, why)
    return CanonicalError(toks[i], i, char, why)
