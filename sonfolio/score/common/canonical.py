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

Tokens: sonfolio.score.common.lexicon. Lengths: `Fraction`s of a whole note (`4` is 1/4).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sonfolio.score.common import lexicon as lx


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
    try:
        validate(text, time)
    except CanonicalError:
        return False
    return True


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
    Parser(text, time).run()


def time_after(text: str, time: str | None = None) -> str | None:
    """The time signature in force at the end of a valid system (what the next system is read
    in); None when neither the system nor `time` ever stated one."""
    parser = Parser(text, time)
    parser.run()
    return parser.time or None


def bar_lengths(text: str, time: str | None = None) -> list[Fraction]:
    """The length of each bar of a valid system, in whole notes (a pickup bar's included)."""
    parser = Parser(text, time)
    parser.run()
    return parser.lengths


def time_measure(time: str) -> Fraction:
    """The length of a measure of time signature `time` ("6/8" -> 3/4)."""
    m = lx.FRACTION.fullmatch(time)
    too_big = m is not None and int(m.group(1)) > lx.MAX_TIME_NUMERATOR
    if m is None or too_big or int(m.group(2)) not in lx.DURATION_BASES:
        raise ValueError(
            f"not a time signature: {time!r}; write N/D with N <= {lx.MAX_TIME_NUMERATOR} and "
            f"D one of {lx.DURATION_BASES}"
        )
    return Fraction(int(m.group(1)), int(m.group(2)))


def header_time(text: str) -> str | None:
    """The time signature a system's header prints (`\\time N/D` right after the key), if any."""
    toks = text.split(" ")
    return toks[6] if len(toks) > 6 and toks[5] == "\\time" else None


class Parser:
    """A single pass over the tokens of one system, tracking bar lengths, ties and tuplets."""

    def __init__(self, text: str, time: str | None = None) -> None:
        self.context_time = time
        self.context_measure = None if time is None else time_measure(time)
        self.toks = text.split(" ")
        self.starts: list[int] = []
        pos = 0
        for tok in self.toks:
            self.starts.append(pos)
            pos += len(tok) + 1
        self.i = 0
        self.clef = ""
        self.key: tuple[str, str] = ("", "")
        self.measure: Fraction | None = None  # None: not known yet (set by the first full bar)
        self.time = ""
        self.partial: Fraction | None = None
        self.bar = Fraction(0)  # length of the current bar so far
        self.bar_events = 0
        self.bars = 0  # completed bars
        self.lengths: list[Fraction] = []  # each bar's length, filled as the bars end
        self.tie_from: set[tuple[int, int]] | None = None  # pitches of a pending tie
        self.changes: list[str] = []  # change commands seen at the start of the current bar
        self.clef_pending = False  # a mid-bar clef change still waits for its music
        self.slur_open = False  # a slur began on an earlier event (the order of markings
        # puts `(` after `)`, so a slur can never end on the event it began on)
        self.grace_pending = False  # a grace group waits for the note it ornaments

    def fail(self, why: str, at: int | None = None) -> CanonicalError:
        i = self.i if at is None else at
        if i >= len(self.toks):
            end = self.starts[-1] + len(self.toks[-1])
            return CanonicalError("<end>", len(self.toks), end, why)
        return CanonicalError(self.toks[i], i, self.starts[i], why)

    def take(self, exact: str | None = None, what: str | None = None) -> str:
        """Consume the next token; `exact` demands that token, `what` describes the need."""
        what = what or (repr(exact) if exact else "more")
        if self.i >= len(self.toks):
            raise self.fail(f"text ends early; expected {what}")
        tok = self.toks[self.i]
        if tok == "":
            raise self.fail("tokens must be separated by exactly one space")
        if not lx.ALLOWED_CHARS.issuperset(tok):
            bad = next(c for c in tok if c not in lx.ALLOWED_CHARS)
            raise self.fail(f"character {bad!r} is not allowed")
        if exact is not None and tok != exact:
            raise self.fail(f"expected {what}")
        self.i += 1
        return tok

    def run(self) -> None:
        self.take("\\clef")
        self.clef = self.clef_arg()
        self.take("\\key")
        self.key = self.key_args()
        if self.i < len(self.toks) and self.toks[self.i] == "\\time":
            self.take()
            self.measure = self.time_arg()
            if self.i < len(self.toks) and self.toks[self.i] == "\\partial":
                self.take()
                self.partial = self.partial_arg()
        elif self.context_time is not None:
            self.time, self.measure = self.context_time, self.context_measure
        if self.i < len(self.toks) and self.toks[self.i] == "\\partial":
            raise self.fail(
                "a pickup opens a piece, whose first system prints its time: "
                "\\partial only right after the header's \\time"
            )
        if self.i < len(self.toks) and self.toks[self.i] == "\\bar":
            self.take()
            self.bar_arg(lx.BAR_START_TYPES, 'a line opens only with a start repeat \\bar ".|:"')
        self.body()

    def clef_arg(self) -> str:
        tok = self.take(what="a clef")
        if tok not in lx.CLEFS:
            raise self.fail(f"unknown clef; allowed: {', '.join(lx.CLEFS)}", self.i - 1)
        return tok

    def key_args(self) -> tuple[str, str]:
        tonic = self.take(what="a key tonic")
        mode_tok = self.take(what="\\major")
        if mode_tok == "\\minor":
            raise self.fail(
                "a key is written by its signature, as the major key with it "
                "(G minor is \\key bes \\major)",
                self.i - 1,
            )
        if mode_tok != "\\major":
            raise self.fail("expected \\major", self.i - 1)
        key = (tonic, "major")
        if key not in lx.KEYS:
            raise self.fail(
                f"no key signature {tonic} {mode_tok}: the tonic of a major key with at most "
                "7 sharps or flats",
                self.i - 2,
            )
        return key

    def time_arg(self) -> Fraction:
        tok = self.take(what="a time signature N/D")
        m = lx.FRACTION.fullmatch(tok)
        if (
            m is None
            or int(m.group(1)) > lx.MAX_TIME_NUMERATOR
            or int(m.group(2)) not in lx.DURATION_BASES
        ):
            raise self.fail(
                f"time signature must be N/D, N <= {lx.MAX_TIME_NUMERATOR}, "
                f"D in {lx.DURATION_BASES}",
                self.i - 1,
            )
        self.time = tok  # 4/4 and 2/2 last the same but are different signatures
        return Fraction(int(m.group(1)), int(m.group(2)))

    def partial_arg(self) -> Fraction:
        tok = self.take(what="a pickup length")
        m = lx.PARTIAL.fullmatch(tok)
        if m is None:
            raise self.fail("pickup must be a duration, D*N or D*N/M", self.i - 1)
        length = lx.dur_value(m.group(1), m.group(2)) * int(m.group(3) or 1) / int(m.group(4) or 1)
        try:
            canonical = lx.partial_token(length)
        except ValueError as err:
            raise self.fail(f"pickup cannot be written: {err}", self.i - 1) from err
        if canonical != tok:
            raise self.fail(f"pickup not canonical: write it as {canonical}", self.i - 1)
        if length >= self.measure:
            raise self.fail("a pickup must be shorter than the measure", self.i - 1)
        return length

    def body(self) -> None:
        while self.i < len(self.toks):
            tok = self.toks[self.i]
            if self.grace_pending and not (lx.NOTE.fullmatch(tok) or tok.startswith("<")):
                raise self.fail("a grace group is followed by the note or chord it ornaments")
            if tok == "|":
                self.bar_check()
            elif tok in ("\\clef", "\\key", "\\time"):
                self.change(tok)
            elif tok == "\\tuplet":
                self.tuplet()
            elif tok == "\\bar":
                self.barline()
            elif tok in lx.GRACES:
                self.grace()
            else:
                self.bar += self.event()
                self.markings()
        self.end()

    def bar_arg(self, allowed: tuple[str, ...] = lx.BAR_TYPES, where: str = "") -> str:
        """A bar line type; one outside `allowed` (a subset of lx.BAR_TYPES) fails with `where`."""
        tok = self.take(what="a bar line type")
        if tok not in lx.BAR_TYPES:
            raise self.fail(f"unknown bar line; allowed: {' '.join(lx.BAR_TYPES)}", self.i - 1)
        if tok not in allowed:
            raise self.fail(where, self.i - 1)
        return tok

    def barline(self) -> None:
        """`\\bar "T"`: right before a `|` (any type) or at the text's end (an ending type)."""
        if self.bar_events == 0:
            raise self.fail(
                "\\bar goes after a bar's last event, right before '|' or at the end of the "
                "text (a start repeat opening the line: right after the header)"
            )
        if self.clef_pending:
            raise self.fail("a clef change with no music after it")
        self.take()
        if self.i >= len(self.toks) - 1:  # the text ends with this bar line
            self.bar_arg(lx.BAR_END_TYPES, f"a line ends only with {' '.join(lx.BAR_END_TYPES)}")
        else:
            self.bar_arg()  # any type before a '|'
            if self.toks[self.i] != "|":
                raise self.fail("a \\bar is followed by '|' or ends the text")

    def grace(self) -> None:
        """`\\grace { ... }`: 1-4 untied, unmarked notes or chords lasting nothing, then a note."""
        self.take()
        self.take("{")
        count = 0
        while self.i < len(self.toks) and self.toks[self.i] != "}":
            tok = self.toks[self.i]
            if not (lx.NOTE.fullmatch(tok) or tok.startswith("<")):
                raise self.fail("a grace group holds only notes and chords, with no markings")
            if count == lx.MAX_GRACE_EVENTS:
                raise self.fail(f"a grace group holds at most {lx.MAX_GRACE_EVENTS} notes")
            self.take()
            if tok.startswith("<"):
                _, _, tie = self.chord(tok)
            else:
                tie = lx.NOTE.fullmatch(tok).group(4)  # type: ignore[union-attr]
            if tie:
                raise self.fail("grace notes are not tied", self.i - 1)
            count += 1
        if count == 0:
            raise self.fail("empty grace group")
        self.take("}")
        self.grace_pending = True

    def markings(self) -> None:
        """The markings after the event just read: articulations, a dynamic, `)`, `(`."""
        rank = -1
        rest = lx.REST.fullmatch(self.toks[self.i - 1]) is not None
        while self.i < len(self.toks) and self.toks[self.i] in lx.MARK_RANK:
            tok = self.toks[self.i]
            if lx.MARK_RANK[tok] <= rank:
                raise self.fail(
                    "markings follow their event once each, in the order "
                    f"{' '.join(lx.ARTICULATIONS)}, a dynamic, ')', '('"
                )
            if rest and tok != "\\fermata":
                raise self.fail("a rest takes only \\fermata")
            rank = lx.MARK_RANK[tok]
            if tok == lx.SLUR_END:
                if not self.slur_open:
                    raise self.fail("')' ends a slur begun on an earlier note")
                self.slur_open = False
            elif tok == lx.SLUR_START:
                if self.slur_open:
                    raise self.fail("a slur is already open; end it with ')' first")
                self.slur_open = True
            self.take()

    def bar_check(self) -> None:
        if self.bar_events == 0:
            raise self.fail("empty bar")
        if self.clef_pending:
            raise self.fail("a clef change belongs after the bar check, before the next bar")
        expected = self.partial if (self.bars == 0 and self.partial is not None) else self.measure
        if expected is None:  # no time signature known: the first full bar sets the measure
            self.measure = expected = self.bar
        if self.bar != expected:
            raise self.fail(f"bar {self.bars + 1} lasts {self.bar}, the measure is {expected}")
        self.take()
        if self.i >= len(self.toks):
            raise self.fail("no music after the last bar check (no trailing '|')", self.i - 1)
        self.lengths.append(self.bar)
        self.bars += 1
        self.bar = Fraction(0)
        self.bar_events = 0
        self.changes = []

    def change(self, cmd: str) -> None:
        """A clef, key or time change: key and time only at a bar start, clef anywhere."""
        at = self.i
        at_bar_start = self.bar_events == 0
        if at_bar_start and self.bars == 0:
            raise self.fail(f"the header states the first bar's {cmd}; no {cmd} before its music")
        if cmd != "\\clef" and not at_bar_start:
            raise self.fail(f"{cmd} may change only at the start of a bar (after '|')")
        if (
            at_bar_start
            and self.changes
            and lx.CHANGE_ORDER.index(cmd) <= lx.CHANGE_ORDER.index(self.changes[-1])
        ):
            raise self.fail(
                "changes at a bar start go in the order \\clef, \\key, \\time, once each"
            )
        if self.clef_pending:
            raise self.fail("two clef changes with no music between them")
        self.take()
        if cmd == "\\clef":
            new: object = self.clef_arg()
            same, self.clef = new == self.clef, new
            self.clef_pending = not at_bar_start
        elif cmd == "\\key":
            new = self.key_args()
            same, self.key = new == self.key, new
        else:
            old = self.time
            self.measure = self.time_arg()
            same = self.time == old
        if same:
            raise self.fail(f"{cmd} restates what is already in force", at)
        if at_bar_start:
            self.changes.append(cmd)

    def tuplet(self) -> None:
        self.take()
        tok = self.take(what="a tuplet ratio N/M")
        m = lx.FRACTION.fullmatch(tok)
        if (
            m is None
            or m.group(1) == m.group(2)
            or max(int(m.group(1)), int(m.group(2))) > lx.MAX_TUPLET_NUMBER
        ):
            raise self.fail(
                f"tuplet ratio must be N/M, N != M, up to {lx.MAX_TUPLET_NUMBER}", self.i - 1
            )
        self.take("{")
        inner = Fraction(0)
        count = 0
        while self.i < len(self.toks) and self.toks[self.i] != "}":
            if self.toks[self.i] in ("|", "{") or self.toks[self.i].startswith("\\"):
                raise self.fail("a tuplet holds only notes, rests and chords (no nesting)")
            inner += self.event()
            self.markings()
            count += 1
        if count == 0:
            raise self.fail("empty tuplet")
        self.take("}")
        self.bar += inner * int(m.group(2)) / int(m.group(1))

    def event(self) -> Fraction:
        """Read one note, rest or chord; return its written length."""
        tok = self.take()
        if (m := lx.NOTE.fullmatch(tok)) is not None:
            pitches = {lx.pitch_order(m.group(1))}
            length, tie = lx.dur_value(m.group(2), m.group(3)), m.group(4)
        elif (m := lx.REST.fullmatch(tok)) is not None:
            pitches, length, tie = set(), lx.dur_value(m.group(1), m.group(2)), ""
        elif tok.startswith("<"):
            pitches, length, tie = self.chord(tok)
        else:
            raise self.fail(self.unknown(tok), self.i - 1)
        self.resolve_tie(pitches)
        if tie:
            self.tie_from = pitches
        self.bar_events += 1
        self.clef_pending = False
        self.grace_pending = False
        self.changes = []
        return length

    def unknown(self, tok: str) -> str:
        if tok in lx.MARK_RANK:
            return "a marking follows the note, rest or chord it marks"
        if tok in lx.COMMANDS:
            return f"{tok} is not allowed here"
        if tok.startswith("\\"):
            return f"command not allowed; only {' '.join(lx.COMMANDS)}"
        if tok in ("{", "}"):
            return "braces only delimit a \\tuplet or a grace group"
        if ">" in tok:
            return "'>' without an opening '<'"
        return "not a note, rest, chord, bar check or command"

    def chord(self, first: str) -> tuple[set[tuple[int, int]], Fraction, str]:
        at = self.i - 1
        if lx.CHORD_END.fullmatch(first[1:]) is not None:
            raise self.fail("a chord needs at least two pitches; write one pitch as a note", at)
        names = [first[1:]]
        while True:
            if self.i >= len(self.toks):
                raise self.fail("unclosed chord: '<' without '>'", at)
            tok = self.take()
            if (m := lx.CHORD_END.fullmatch(tok)) is not None:
                names.append(m.group(1))
                break
            names.append(tok)
        for k, name in enumerate(names):
            if lx.PITCH.fullmatch(name) is None:
                raise self.fail(f"not a pitch inside a chord: {name!r}", at + k)
        keys = [lx.pitch_order(n) for n in names]
        if any(a >= b for a, b in zip(keys, keys[1:], strict=False)):
            raise self.fail("chord pitches must be distinct and ascending", at)
        return set(keys), lx.dur_value(m.group(2), m.group(3)), m.group(4)

    def resolve_tie(self, pitches: set[tuple[int, int]]) -> None:
        if self.tie_from is not None and not (self.tie_from & pitches):
            raise self.fail("tie to an event that shares no pitch with it", self.i - 1)
        self.tie_from = None

    def end(self) -> None:
        if self.bar_events == 0:
            raise self.fail("the last bar has no music")
        if self.tie_from is not None:
            raise self.fail("the last event is tied to nothing (LilyPond would not draw it)")
        if self.grace_pending:
            raise self.fail("a grace group is followed by the note or chord it ornaments")
        if self.slur_open:
            raise self.fail("a slur is still open at the end of the line; close it with ')'")
        if self.clef_pending:
            raise self.fail("a clef change with no music after it", len(self.toks) - 2)
        if self.bars == 0 and self.partial is not None:
            if self.bar != self.partial:
                raise self.fail(f"pickup bar lasts {self.bar}, \\partial says {self.partial}")
        elif self.measure is not None and self.bar > self.measure:
            raise self.fail(f"last bar lasts {self.bar}, longer than the measure {self.measure}")
        self.lengths.append(self.bar)
