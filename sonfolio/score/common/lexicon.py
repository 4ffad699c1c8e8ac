"""The canonical LilyPond lexicon: every token the grammar knows, one place for every module that
reads or writes canonical text (the parser in sonfolio.score.common.canonical, the decoders
under sonfolio.score.decode, the metrics, the converters and the generator).

Its clefs, keys, durations, pitches, markings, grace groups, bar lines and commands, the
patterns that read a note, a rest, a chord's end, a time signature and a pickup, and the
helpers that turn lengths and pitches into tokens and back. docs/canonical-lilypond.md
describes the format.

Units: every length here is a `Fraction` of a whole note (LilyPond's unit: `4` is 1/4).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from fractions import Fraction

# Version of the canonical text format: 2 dropped the key's mode and made the header's time
# signature say only what is printed; 3 added markings: articulations, dynamics, slurs, grace
# notes and bar lines (docs/canonical-lilypond.md, "Versions").
FORMAT_VERSION = 3

# Clef tokens exactly as they appear after `\clef` (octave clefs need LilyPond's quotes).
CLEFS: tuple[str, ...] = (
    "treble",
    "bass",
    "alto",
    "tenor",
    "soprano",
    "mezzosoprano",
    "baritone",
    "varbaritone",
    "subbass",
    "french",
    '"treble_8"',
    '"treble^8"',
    '"bass_8"',
    '"bass^8"',
)

# Tonics by number of sharps (negative: flats), -7..7; index = sharps + 7.
# fmt: off
MAJOR_TONICS = ("ces", "ges", "des", "aes", "ees", "bes", "f",
                "c", "g", "d", "a", "e", "b", "fis", "cis")
MINOR_TONICS = ("aes", "ees", "bes", "f", "c", "g", "d",
                "a", "e", "b", "fis", "cis", "gis", "dis", "ais")
# fmt: on
# The 15 key signatures as (tonic, mode) pairs: a key is written by its signature, as the
# major key with it (an image shows the signature, never the mode). MINOR_TONICS stays for the
# synthetic generator, which writes music in minor keys too.
KEYS: tuple[tuple[str, str], ...] = tuple((t, "major") for t in MAJOR_TONICS)

# Time signatures the synthetic generator draws from. `validate` accepts any N/D with
# 1 <= N <= 32 and D a power of two up to 64, because real music uses more than these.
TIMES: tuple[str, ...] = (
    "2/4", "3/4", "4/4", "2/2", "3/2", "4/2", "6/4", "5/4", "7/4",
    "3/8", "5/8", "6/8", "7/8", "9/8", "12/8", "2/8", "3/16", "6/16",
)  # fmt: skip

DURATION_BASES = (1, 2, 4, 8, 16, 32, 64)
MAX_DOTS = 2
# Every duration token, e.g. "4", "8.", "16..".
DURATIONS: tuple[str, ...] = tuple(
    f"{b}{'.' * d}" for b in DURATION_BASES for d in range(MAX_DOTS + 1)
)

# Markings that follow an event, each its own token, in this order (format 3). A rest takes
# only `\\fermata`; dynamics and slurs mark notes and chords.
ARTICULATIONS = ("-.", "--", "->", "-^", "\\fermata", "\\trill")
DYNAMICS = (
    "\\ppp", "\\pp", "\\p", "\\mp", "\\mf", "\\f", "\\ff", "\\fff",
    "\\fp", "\\sf", "\\sfp", "\\sfz", "\\fz", "\\rfz",
)  # fmt: skip
SLUR_END, SLUR_START = ")", "("
# Rank of each marking in the order after an event: articulations, a dynamic, `)`, `(`.
MARK_RANK: dict[str, int] = {
    **{a: i for i, a in enumerate(ARTICULATIONS)},
    **{d: len(ARTICULATIONS) for d in DYNAMICS},
    SLUR_END: len(ARTICULATIONS) + 1,
    SLUR_START: len(ARTICULATIONS) + 2,
}
MARKINGS: tuple[str, ...] = tuple(MARK_RANK)
# Grace groups: `\\grace { c'16 d'16 }`, `\\acciaccatura { d''8 }` (slashed), before a note.
GRACES = ("\\grace", "\\acciaccatura")
MAX_GRACE_EVENTS = 4
# Bar line types `\\bar "T"` (with their quotes): start repeat, end repeat, both, double, final.
BAR_TYPES = ('".|:"', '":|."', '":..:"', '"||"', '"|."')
BAR_START_TYPES = ('".|:"',)  # a line may open with these (right after its header)
BAR_END_TYPES = ('":|."', '"||"', '"|."')  # a line may end with these

# The only backslash commands a canonical text may hold.
COMMANDS = (
    "\\clef", "\\key", "\\major", "\\time", "\\partial", "\\tuplet", "\\bar", *GRACES,
    *(m for m in MARKINGS if m.startswith("\\")),
)  # fmt: skip

MAX_UP_OCTAVES = 5  # c''''' is far above any staff's ledger lines
MAX_DOWN_OCTAVES = 4  # c,,,, likewise below
MAX_TIME_NUMERATOR = 32
MAX_TUPLET_NUMBER = 32

STEPS = "cdefgab"
ALTER = {"": 0, "is": 1, "isis": 2, "es": -1, "eses": -2}
# The spellings as regular-expression pieces, for every reader of canonical text (or of a
# prediction that breaks it) to compose with the groups it needs: a pitch's step, alteration
# and octave marks; a duration's base and dots.
STEP_RE, ALTER_RE, OCTAVE_RE = "[a-g]", "isis|eses|is|es", "'{1,5}|,{1,4}"
BASE_RE, DOTS_RE = "1|2|4|8|16|32|64", r"\.{0,2}"
PITCH_RE = rf"({STEP_RE})({ALTER_RE})?({OCTAVE_RE})?"  # groups: step, alteration, marks
DURATION_RE = rf"({BASE_RE})({DOTS_RE})"  # groups: base, dots
_PITCH_NAME = rf"{STEP_RE}(?:{ALTER_RE})?(?:{OCTAVE_RE})?"  # one group-free pitch
PITCH = re.compile(PITCH_RE)
NOTE = re.compile(rf"({_PITCH_NAME}){DURATION_RE}(~?)")
REST = re.compile(rf"r{DURATION_RE}")
CHORD_END = re.compile(rf"({_PITCH_NAME})>{DURATION_RE}(~?)")
FRACTION = re.compile(r"([1-9][0-9]?)/([1-9][0-9]?)")
PARTIAL = re.compile(rf"{DURATION_RE}(?:\*([1-9][0-9]*)(?:/([1-9][0-9]*))?)?")
# Characters a canonical text can contain at all; anything else (#, $, %, (, \n ...) is hostile
# or foreign: `take` rejects a token holding one before looking at it any further.
ALLOWED_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789',.~<>|{}/\\\"_^* ():-")

CHANGE_ORDER = ("\\clef", "\\key", "\\time")
# Commands joined with their arguments into one symbol by `symbols` (number of arguments).
_SYMBOL_ARITY = {"\\clef": 1, "\\key": 2, "\\time": 1, "\\partial": 1, "\\tuplet": 1, "\\bar": 1}


def duration_value(token: str) -> Fraction:
    """The length of a duration token like "4." in whole notes."""
    m = re.fullmatch(DURATION_RE, token)
    if m is None:
        raise ValueError(f"not a canonical duration: {token!r}; expected one of {DURATIONS}")
    return dur_value(m.group(1), m.group(2))


def dur_value(base: str, dots: str) -> Fraction:
    # Each dot adds half of the previous value: d dots = (2 - 2**-d) times the base.
    return Fraction(1, int(base)) * (2 - Fraction(1, 2 ** len(dots)))


def duration_token(length: Fraction) -> str | None:
    """The duration token for a length in whole notes, or None when no single token has it."""
    return _duration_table().get(length)


@functools.cache
def _duration_table() -> dict[Fraction, str]:
    return {duration_value(tok): tok for tok in DURATIONS}


def partial_token(length: Fraction) -> str:
    """The canonical argument of `\\partial` for a pickup of `length` whole notes.

    One duration token when there is one (`4.`), else `16*5` for power-of-two lengths, else
    `4*1/3` (a pickup inside a tuplet): the base is 1/2**k of the reduced denominator.
    """
    if length <= 0:
        raise ValueError(f"a pickup must be longer than 0, got {length}")
    single = duration_token(length)
    if single is not None:
        return single
    den = length.denominator
    pow2 = den & -den  # the power-of-two part of the denominator
    odd = den // pow2
    if pow2 > DURATION_BASES[-1]:
        raise ValueError(f"pickup {length} needs a unit shorter than 1/64")
    if odd == 1:
        return f"{pow2}*{length.numerator}"
    return f"{pow2}*{length.numerator}/{odd}"


def pitch_name(step: str, alter: int, octave: int) -> str:
    """LilyPond absolute pitch, e.g. ("f", 1, 4) -> "fis'" (octave 4 holds middle C, c')."""
    suffix = {0: "", 1: "is", 2: "isis", -1: "es", -2: "eses"}[alter]
    marks = octave - 3
    return step + suffix + ("'" * marks if marks > 0 else "," * -marks)


def pitch_order(name: str) -> tuple[int, int]:
    """Sort key of a pitch: staff position (diatonic step), then alteration.

    Chord pitches must be strictly ascending by this key: it is the order of the note heads on
    the staff, and it makes the spelling of a chord unique.
    """
    m = PITCH.fullmatch(name)
    if m is None:
        raise ValueError(f"not a canonical pitch: {name!r}")
    step, acc, marks = m.group(1), m.group(2) or "", m.group(3) or ""
    octave = 3 + (len(marks) if marks.startswith("'") else -len(marks))
    return octave * 7 + STEPS.index(step), ALTER[acc]


def symbols(text: str) -> list[str]:
    """Split a text (canonical or not: model output too) into symbols for symbol error rate.

    Each space-separated token is a symbol, except that a command and its arguments form one
    symbol: `\\clef treble`, `\\key d \\major`, `\\time 3/4`, `\\partial 4`, `\\tuplet 3/2 {`
    and `\\grace {` (the brace joins when present), `\\bar ":|."`. A chord is split at its
    spaces: `<c'`, `e'`, `g'>4~`. Each marking (`-.`, `\\p`, `(`) is a symbol.
    """
    toks = text.split()
    out: list[str] = []
    i = 0
    while i < len(toks):
        arity = _SYMBOL_ARITY.get(toks[i], 0)
        if toks[i] == "\\tuplet" and i + 2 < len(toks) and toks[i + 2] == "{":
            arity = 2
        elif toks[i] in GRACES and i + 1 < len(toks) and toks[i + 1] == "{":
            arity = 1
        out.append(" ".join(toks[i : i + 1 + arity]))
        i += 1 + arity
    return out


def marking_tokens(
    marks: Sequence[str], dynamic: str | None, slur_end: bool, slur_start: bool
) -> list[str]:
    """The markings after an event, in canonical order: its articulations (already in the order
    of ARTICULATIONS), its dynamic, `)`, `(`."""
    out = list(marks)
    if dynamic is not None:
        out.append(dynamic)
    if slur_end:
        out.append(SLUR_END)
    if slur_start:
        out.append(SLUR_START)
    return out
