"""Why the canonical grammar refuses: each refusal a `Why`, which the grammar's parser
(sonfolio.score.common.token_state) returns where a check fails, and whose words are written only
when someone asks (canonical.validate does; the decoders never do).

A `Why` is an int equal to 0, so it is falsy and costs what `return False` costs: the
decoders' beam search, where most candidate tokens are refused, only tests `not s.take(tok)`.
Its `at` says which token the message names, as an offset from the token refused (or, when
the text ends too early, from the end: 0 is "<end>", -1 the last token), or `CHORD`: the first
token of the chord being read. `before_take` marks the checks that look at a token before
anything else does (the old parser's checks before it took the token): a token that is empty
or holds a foreign character is named as such unless one of those refused it first.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from sonfolio.score.common import lexicon as lx

CHORD = None  # `Why.at`: the first token of the chord in progress


class Why(int):
    """A refusal: falsy, with its message (a text, or built from the parser's state and the
    token refused: `says(state, token)`), the token it names and whether it comes first."""

    says: str | Callable[[Any, str], str]
    at: int | None
    before_take: bool

    def __new__(
        cls, says: str | Callable[[Any, str], str], at: int | None = 0, before_take: bool = False
    ) -> Why:
        why = int.__new__(cls, 0)
        why.says, why.at, why.before_take = says, at, before_take
        return why

    # a refusal equals only itself (not every other Why, nor False, as the int 0 would)
    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = object.__hash__

    def text(self, state: Any, token: str) -> str:
        """The message, for `state` (the parser as it refused) and the token it refused."""
        return self.says if isinstance(self.says, str) else self.says(state, token)

    def __repr__(self) -> str:
        return f"Why({self.says if isinstance(self.says, str) else self.says.__name__!r})"


def take_fault(token: str) -> str | None:
    """Why a token is no token at all (empty: two spaces in a row; a character no canonical
    text holds), or None."""
    if token == "":
        return "tokens must be separated by exactly one space"
    if not lx.ALLOWED_CHARS.issuperset(token):
        bad = next(c for c in token if c not in lx.ALLOWED_CHARS)
        return f"character {bad!r} is not allowed"
    return None


def unknown(token: str) -> str:
    """Why a token is not an event where one was read."""
    if token in lx.MARK_RANK:
        return "a marking follows the note, rest or chord it marks"
    if token in lx.COMMANDS:
        return f"{token} is not allowed here"
    if token.startswith("\\"):
        return f"command not allowed; only {' '.join(lx.COMMANDS)}"
    if token in ("{", "}"):
        return "braces only delimit a \\tuplet or a grace group"
    if ">" in token:
        return "'>' without an opening '<'"
    return "not a note, rest, chord, bar check or command"


def _expected(what: str) -> Why:
    return Why(f"expected {what}")


# the header and the arguments of changes
EXPECTED_CLEF = _expected(repr("\\clef"))
EXPECTED_KEY = _expected(repr("\\key"))
EXPECTED_MAJOR = _expected("\\major")
EXPECTED_OPEN = _expected(repr("{"))
UNKNOWN_CLEF = Why(f"unknown clef; allowed: {', '.join(lx.CLEFS)}")
KEY_MINOR = Why(
    "a key is written by its signature, as the major key with it (G minor is \\key bes \\major)"
)
NO_KEY = Why(
    lambda s, tok: (
        f"no key signature {s.tonic} {tok}: the tonic of a major key with at most 7 sharps or flats"
    ),
    at=-1,  # the tonic, refused at the mode after it (a decoder refuses the tonic at once)
)
KEY_TONIC = Why(lambda s, tok: f"no major key signature has the tonic {tok!r}")
TIME_FORMAT = Why(
    f"time signature must be N/D, N <= {lx.MAX_TIME_NUMERATOR}, D in {lx.DURATION_BASES}"
)
PICKUP_FORM = Why("pickup must be a duration, D*N or D*N/M")


def _pickup_length(tok: str) -> Fraction:
    m = lx.PARTIAL.fullmatch(tok)
    assert m is not None  # only a token PARTIAL matched is refused for its length
    return lx.dur_value(m.group(1), m.group(2)) * int(m.group(3) or 1) / int(m.group(4) or 1)


def _unwritable(s: Any, tok: str) -> str:
    try:
        lx.partial_token(_pickup_length(tok))
    except ValueError as err:
        return f"pickup cannot be written: {err}"
    raise AssertionError(f"pickup {tok!r} refused as unwritable, but it can be written")


PICKUP_UNWRITABLE = Why(_unwritable)
PICKUP_NOT_CANONICAL = Why(
    lambda s, tok: f"pickup not canonical: write it as {lx.partial_token(_pickup_length(tok))}"
)
PICKUP_LONG = Why("a pickup must be shorter than the measure")
PICKUP_OPENS = Why(
    "a pickup opens a piece, whose first system prints its time: "
    "\\partial only right after the header's \\time"
)
UNKNOWN_BAR = Why(f"unknown bar line; allowed: {' '.join(lx.BAR_TYPES)}")
BAR_OPENS = Why('a line opens only with a start repeat \\bar ".|:"')
RATIO = Why(f"tuplet ratio must be N/M, N != M, up to {lx.MAX_TUPLET_NUMBER}")

# bars, changes, tuplets, bar lines, grace groups
EMPTY_BAR = Why("empty bar")
CLEF_BEFORE_CHECK = Why("a clef change belongs after the bar check, before the next bar")
BAR_LENGTH = Why(lambda s, tok: f"bar {s.bars + 1} lasts {s.bar}, the measure is {s.room()}")
HEADER_STATES = Why(
    lambda s, tok: f"the header states the first bar's {tok}; no {tok} before its music"
)
MID_BAR_CHANGE = Why(lambda s, tok: f"{tok} may change only at the start of a bar (after '|')")
CHANGE_ORDER = Why("changes at a bar start go in the order \\clef, \\key, \\time, once each")
TWO_CLEFS = Why("two clef changes with no music between them")
RESTATES_CLEF = Why("\\clef restates what is already in force", at=-1)  # named at the command
RESTATES_KEY = Why("\\key restates what is already in force", at=-2)
RESTATES_TIME = Why("\\time restates what is already in force", at=-1)
TUPLET_ONLY = Why("a tuplet holds only notes, rests and chords (no nesting)", before_take=True)
EMPTY_TUPLET = Why("empty tuplet")
BAR_FIRST = Why(
    "\\bar goes after a bar's last event, right before '|' or at the end of the text (a start "
    "repeat opening the line: right after the header)"
)
CLEF_NO_MUSIC = Why("a clef change with no music after it")
BAR_FOLLOW = Why("a \\bar is followed by '|' or ends the text", before_take=True)
GRACE_ONLY = Why("a grace group holds only notes and chords, with no markings", before_take=True)
GRACE_MAX = Why(f"a grace group holds at most {lx.MAX_GRACE_EVENTS} notes", before_take=True)
GRACE_TIED = Why("grace notes are not tied")
EMPTY_GRACE = Why("empty grace group")
GRACE_FOLLOW = Why("a grace group is followed by the note or chord it ornaments", before_take=True)

# events and their markings
NOT_EVENT = Why(lambda s, tok: unknown(tok))
ONE_PITCH = Why("a chord needs at least two pitches; write one pitch as a note")
# A chord's faults are named for the whole chord (canonical reads it to its end first): its
# first name that is no pitch, else its order; the chord's first token is named for the order.
CHORD_PITCH = Why(lambda s, tok: f"not a pitch inside a chord: {tok!r}", at=CHORD)
CHORD_ORDER = Why("chord pitches must be distinct and ascending", at=CHORD)
CHORD_FAULTS = (CHORD_PITCH, CHORD_ORDER)
TIE_MISMATCH = Why("tie to an event that shares no pitch with it")
MARK_FIRST = Why("a marking follows the note, rest or chord it marks")
MARK_ORDER = Why(
    "markings follow their event once each, in the order "
    f"{' '.join(lx.ARTICULATIONS)}, a dynamic, ')', '('"
)
REST_MARK = Why("a rest takes only \\fermata")
SLUR_NOT_OPEN = Why("')' ends a slur begun on an earlier note")
SLUR_OPEN = Why("a slur is already open; end it with ')' first")

# the text's end (offsets from the end: 0 is "<end>")
ENDS_EARLY = Why(lambda s, tok: f"text ends early; expected {s.expects()}")
UNCLOSED = Why("unclosed chord: '<' without '>'", at=CHORD)
NO_MUSIC_AFTER_CHECK = Why("no music after the last bar check (no trailing '|')", at=-1)
LAST_EMPTY = Why("the last bar has no music")
TIED_TO_NOTHING = Why("the last event is tied to nothing (LilyPond would not draw it)")
SLUR_AT_END = Why("a slur is still open at the end of the line; close it with ')'")
CLEF_NO_MUSIC_END = Why("a clef change with no music after it", at=-2)  # its \clef
LINE_ENDS = Why(f"a line ends only with {' '.join(lx.BAR_END_TYPES)}", at=-1)
PICKUP_BAR = Why(lambda s, tok: f"pickup bar lasts {s.bar}, \\partial says {s.pickup}")
LAST_LONG = Why(lambda s, tok: f"last bar lasts {s.bar}, longer than the measure {s.measure}")

# dead ends a decoder foresees (`State.prune`); `validate` names each where the text breaks
OVERFULL = Why("the bar is already longer than its measure")
BAR_DEAD_END = Why("neither a '|' (the bar is not full) nor the text's end may follow this \\bar")
NO_ROOM = Why("no room left in the bar for the note a grace group ornaments")
TIE_CANNOT = Why("no pitch left that this chord may still take to hold the pending tie")
