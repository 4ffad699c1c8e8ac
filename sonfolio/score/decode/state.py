"""The canonical grammar read incrementally: `State`, the parser that decoding under the
grammar runs a piece at a time, so every text a model writes validates.

`State` reads a text a piece at a time (a character, a tokenizer piece such as "Ġfis''4.") and
says whether the prefix read so far can still become a text that `canonical.validate(text,
time)` accepts (`feed` returns None when it cannot) and whether it is one as it stands
(`complete`). On a whole text it agrees with `validate` exactly (tests/score/test_constrained.py
checks the grammar's own lists, synthetic systems and random mutations of both).

How it reads, what it refuses at once and what it leaves viable, and what a step costs:
docs/canonical-lilypond.md, "Decoding under the grammar".
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from sonfolio.score.common import canonical as cn
from sonfolio.score.common import lexicon as lx
from sonfolio.score.decode import tables as tb

if TYPE_CHECKING:
    from sonfolio.score.decode.vocab import Vocab

from sonfolio.score.decode.tables import (
    BAR_ENDS,
    BAR_STARTS,
    BAR_TYPES,
    FERMATA,
    MARK_RANK,
    ORDER,
    PARTIAL_PREFIX,
    SHORTEST,
    event_of,
    partial_length,
    pitch_key,
    time_length,
    token_tables,
)

_new = object.__new__


class State:
    """The canonical parser's state after a prefix of a text, copied on every step.

    Build the first one with `State.start(time)`; `feed(text)` and `step(vocab, id)` return the
    next state, or None when no text starting with the prefix can validate.
    """

    __slots__ = (
        "mode",
        "partial",
        "ctx_time",
        "ctx_measure",
        "clef",
        "key",
        "tonic",
        "time",
        "measure",
        "pickup",
        "bar",
        "bar_events",
        "bars",
        "tie",
        "last_change",
        "change_start",
        "clef_pending",
        "tuplet",
        "inner",
        "count",
        "chord",
        "slur",
        "mark",
        "rest",
        "grace",
        "bar_end",
        "children",
        "_complete",
    )

    @classmethod
    def start(cls, time: str | None = None) -> State:
        """Before the first character; `time` as `canonical.validate` takes it.

        Raises:
            ValueError: `time` is not a time signature N/D.
        """
        s = cls.__new__(cls)
        s.mode, s.partial = tb.HCLEF_CMD, ""
        s.ctx_time, s.ctx_measure = time, None if time is None else cn.time_measure(time)
        s.clef = s.key = s.tonic = s.time = ""
        s.measure = s.pickup = None
        s.bar, s.bar_events, s.bars = Fraction(0), 0, 0
        s.tie = None  # pitches of a pending tie
        s.last_change = -1  # the last change at this bar's start (ORDER), -1: none
        s.change_start = s.clef_pending = False
        s.tuplet, s.inner, s.count = None, Fraction(0), 0  # (N, M) of an open tuplet
        s.chord = None  # the pitch keys of a chord in progress
        s.slur = False  # a slur is open
        # the rank (canonical.MARK_RANK) of the last marking the event just read took, -1:
        # none yet; None: the last token was no event or marking, so no marking may come
        s.mark = None
        s.rest = False  # the last event was a rest (it takes only \fermata)
        s.grace = 0  # events in the grace group being read
        s.bar_end = False  # the in-body \bar just read may end the text (an ending type)
        s.children, s._complete = None, None
        return s

    def copy(self) -> State:
        """Every field but the caches (written out: 5 times faster than a loop over the slots;
        tests/score/test_constrained.py checks that none is left out)."""
        s = _new(State)
        s.mode, s.partial, s.ctx_time, s.ctx_measure = (
            self.mode,
            self.partial,
            self.ctx_time,
            self.ctx_measure,
        )
        s.clef, s.key, s.tonic, s.time = self.clef, self.key, self.tonic, self.time
        s.measure, s.pickup, s.bar, s.bar_events, s.bars = (
            self.measure,
            self.pickup,
            self.bar,
            self.bar_events,
            self.bars,
        )
        s.tie, s.last_change, s.change_start, s.clef_pending = (
            self.tie,
            self.last_change,
            self.change_start,
            self.clef_pending,
        )
        s.tuplet, s.inner, s.count, s.chord = self.tuplet, self.inner, self.count, self.chord
        s.slur, s.mark, s.rest, s.grace, s.bar_end = (
            self.slur,
            self.mark,
            self.rest,
            self.grace,
            self.bar_end,
        )
        s.children = s._complete = None
        return s

    # --- reading ---

    def step(self, vocab: Vocab, token: int) -> State | None:
        """The state after one tokenizer piece (cached per state); None: dead or special."""
        if self.children is None:
            self.children = {}
        elif token in self.children:
            return self.children[token]
        piece = vocab.pieces[token]
        child = None if piece is None else self.feed(piece)
        self.children[token] = child
        return child

    def feed(self, text: str) -> State | None:
        """The state after `text` (any characters); None when the prefix cannot validate."""
        s = self.copy()
        parts = text.split(" ")
        for part in parts[:-1]:  # each space completes the token before it
            tok = s.partial + part
            if not tok or not s._take(tok):  # an empty token: a leading or doubled space
                return None
            s.partial = ""
        s.partial += parts[-1]
        return s if s._viable_partial() else None

    @property
    def complete(self) -> bool:
        """Whether the prefix as it stands is a text `validate` accepts."""
        if self._complete is None:
            self._complete = self._end()
        return self._complete

    def _end(self) -> bool:
        if not self.partial:
            return False
        s = self.copy()
        if not s._take(self.partial):
            return False
        if s.mode == tb.AFTER_BAR:  # a text may end on a bar line of an ending type only
            if not s.bar_end:
                return False
        elif s.mode != tb.BODY:
            return False
        if not s.bar_events or s.tie is not None or s.clef_pending or s.slur:
            return False
        if s.bars == 0 and s.pickup is not None:
            return s.bar == s.pickup
        return True  # an overfull last bar was caught when its event completed

    def room(self) -> Fraction | None:
        """How long the bar in progress may grow: the pickup in a first bar that has one, else
        the measure (None: unknown until the first full bar)."""
        return self.pickup if (self.bars == 0 and self.pickup is not None) else self.measure

    def _viable_partial(self) -> bool:
        p = self.partial
        if self.mode == tb.HPARTIAL:
            return PARTIAL_PREFIX.fullmatch(p) is not None
        if self.mode == tb.GRACE and self.grace == lx.MAX_GRACE_EVENTS:
            return p in ("", "}")  # a full grace group: only its end may come
        lex = token_tables()[self.mode].get(p)
        if lex is None:
            return False
        if lex.completions is not None:  # few: check each exactly
            return any(self.copy()._take(t) for t in lex.completions)
        if self.mode in (tb.CHORD, tb.GCHORD):
            # its pitches ascend: a completion must lie above the last
            last, tie = self.chord[-1], self.tie if self.mode == tb.CHORD else None
            if tie is None or tie & frozenset(self.chord):
                return any(k > last for k in lex.pitches)
            top = max(tie, default=last)  # and at or below a tied pitch, while none is held
            return any(last < k <= top for k in lex.pitches)
        if not lex.events_only:
            return True
        if self.tie is not None and self.mode != tb.CHORD and not (self.tie & lex.pitches):
            return False
        if lex.min_len is not None and (limit := self.room()) is not None:
            if self.tuplet is not None:
                n, m = self.tuplet
                return self.bar + (self.inner + lex.min_len) * m / n <= limit
            return self.bar + lex.min_len <= limit
        return True

    # --- one completed token, as canonical.Parser checks it ---

    def _take(self, tok: str) -> bool:
        """Apply one whole token; False when `validate` would reject it (or the bar is already
        longer than it may be). Mutates the state."""
        mode = self.mode
        if mode in (tb.BODY, tb.TUP):
            return self._body(tok)
        if mode == tb.CHORD:
            return self._chord(tok)
        if mode in (tb.GRACE, tb.GCHORD):
            return self._grace(tok)
        if mode == tb.AFTER_GRACE:  # the ornamented note or chord
            self.mode = tb.BODY
            if tok[:1] == "<":
                return self._chord_start(tok)
            ev = event_of(tok)
            return ev is not None and bool(ev[0]) and self._add_event(*ev)  # no rest
        if mode == tb.AFTER_BAR:
            self.mode = tb.BODY
            return tok == "|" and self._bar_check()
        if mode == tb.AFTER_KEY:
            if tok == "\\time":
                self.mode = tb.HTIME
                return True
            if tok == "\\partial":
                return False
            if self.ctx_time is not None:
                self.time, self.measure = self.ctx_time, self.ctx_measure
            mode = tb.START
        elif mode == tb.AFTER_TIME:
            if tok == "\\partial":
                self.mode = tb.HPARTIAL
                return True
            mode = tb.START
        if mode == tb.START:  # the body's first token: a start repeat may open it
            if tok == "\\bar":
                self.mode = tb.HBAR
                return True
            self.mode = tb.BODY
            return self._body(tok)
        return self._argument(mode, tok)

    def _argument(self, mode: int, tok: str) -> bool:
        """Header tokens and the arguments of changes and tuplets."""
        if mode == tb.HCLEF_CMD:
            self.mode = tb.HCLEF
            return tok == "\\clef"
        if mode == tb.HCLEF:
            self.clef, self.mode = tok, tb.HKEY_CMD
            return tok in lx.CLEFS
        if mode == tb.HKEY_CMD:
            self.mode = tb.HTONIC
            return tok == "\\key"
        if mode in (tb.HTONIC, tb.CTONIC):
            self.tonic, self.mode = tok, tb.HMODE if mode == tb.HTONIC else tb.CMODE
            return tok in lx.MAJOR_TONICS
        if mode == tb.HMODE:
            self.key, self.mode = self.tonic, tb.AFTER_KEY
            return tok == "\\major"
        if mode == tb.HTIME:
            self.measure, self.time, self.mode = time_length(tok), tok, tb.AFTER_TIME
            return self.measure is not None
        if mode == tb.HPARTIAL:
            self.pickup, self.mode = partial_length(tok, self.measure), tb.START
            return self.pickup is not None
        if mode == tb.HBAR:
            self.mode = tb.BODY
            return tok in BAR_STARTS
        if mode == tb.BAR:  # kept only when the `|` after it or the text's end can follow
            self.mode, self.bar_end = tb.AFTER_BAR, tok in BAR_ENDS
            return tok in BAR_TYPES and (self._full() or (self.bar_end and self._may_end()))
        if mode == tb.GOPEN:
            self.grace, self.mode = 0, tb.GRACE
            return tok == "{"
        if mode == tb.CCLEF:
            if tok not in lx.CLEFS or tok == self.clef:
                return False
            self.clef, self.clef_pending, self.mode = tok, not self.change_start, tb.BODY
            if self.change_start:
                self.last_change = 0
            return True
        if mode == tb.CMODE:
            if tok != "\\major" or self.tonic == self.key:
                return False
            self.key, self.last_change, self.mode = self.tonic, 1, tb.BODY
            return True
        if mode == tb.CTIME:
            measure = time_length(tok)
            if measure is None or tok == self.time:
                return False
            self.measure, self.time, self.last_change, self.mode = measure, tok, 2, tb.BODY
            return True
        if mode == tb.RATIO:
            m = lx.FRACTION.fullmatch(tok)
            if m is None or m.group(1) == m.group(2):
                return False
            n, d = int(m.group(1)), int(m.group(2))
            self.tuplet, self.mode = (n, d), tb.OPEN
            return max(n, d) <= lx.MAX_TUPLET_NUMBER
        # tb.OPEN
        self.inner, self.count, self.mode = Fraction(0), 0, tb.TUP
        return tok == "{"

    def _body(self, tok: str) -> bool:
        """A token in a bar (mode tb.BODY) or inside a tuplet (tb.TUP)."""
        rank = MARK_RANK.get(tok)
        if rank is not None:
            return self._marking(tok, rank)
        self.mark = None  # markings follow only an event (or its markings)
        if self.mode == tb.TUP:
            if tok == "}":
                if not self.count:
                    return False
                n, m = self.tuplet
                self.bar += self.inner * m / n
                self.tuplet, self.mode = None, tb.BODY
                return True
            if tok in ("|", "{") or tok.startswith("\\"):
                return False
        elif tok == "|":
            return self._bar_check()
        elif tok in ORDER:
            return self._change(tok)
        elif tok == "\\tuplet":
            self.mode = tb.RATIO
            return True
        elif tok == "\\bar":  # after the bar's last event, before a `|` or the text's end
            self.mode = tb.BAR
            if not self.bar_events or self.clef_pending:
                return False
            return self._full() or self._may_end()
        elif tok in lx.GRACES:  # the note it ornaments must still fit in the bar
            self.mode = tb.GOPEN
            limit = self.room()
            return limit is None or self.bar + SHORTEST <= limit
        if tok[:1] == "<":
            return self._chord_start(tok)
        ev = event_of(tok)
        return ev is not None and self._add_event(*ev)

    def _chord_start(self, tok: str) -> bool:
        first = tok[1:]
        if lx.CHORD_END.fullmatch(first) is not None:
            return False  # a one-pitch chord
        key = pitch_key(first)
        if key is None:
            return False
        self.chord, self.mode = (key,), tb.CHORD
        return self._chord_can_tie()

    def _marking(self, tok: str, rank: int) -> bool:
        """A marking after an event: in canonical's order, each kind once; a rest takes only
        \\fermata. A `)` needs an open slur begun on an earlier event: one begun on this event
        took its `(` last, after which the order admits no `)`."""
        if self.mark is None or rank <= self.mark or (self.rest and tok != FERMATA):
            return False
        self.mark = rank
        if tok == ")":
            if not self.slur:
                return False
            self.slur = False
        elif tok == "(":
            if self.slur:
                return False
            self.slur = True
        return True

    def _grace(self, tok: str) -> bool:
        """A token of a grace group (modes tb.GRACE, tb.GCHORD): up to MAX_GRACE_EVENTS untied
        notes and chords, then `}`; they last nothing and leave a pending tie alone."""
        if self.mode == tb.GCHORD:
            m = lx.CHORD_END.fullmatch(tok)
            key = pitch_key(m.group(1) if m is not None else tok)
            if key is None or key <= self.chord[-1]:
                return False
            if m is None:
                self.chord += (key,)
                return True
            self.chord, self.mode = None, tb.GRACE
            return not m.group(4)
        if tok == "}":
            self.mode = tb.AFTER_GRACE
            return self.grace > 0
        if self.grace == lx.MAX_GRACE_EVENTS:
            return False
        self.grace += 1
        if tok[:1] == "<":
            key = pitch_key(tok[1:])  # None for a one-pitch chord too
            if key is None:
                return False
            self.chord, self.mode = (key,), tb.GCHORD
            return True
        ev = event_of(tok)
        return ev is not None and bool(ev[0]) and not ev[2]

    def _chord(self, tok: str) -> bool:
        m = lx.CHORD_END.fullmatch(tok)
        key = pitch_key(m.group(1) if m is not None else tok)
        if key is None or key <= self.chord[-1]:
            return False  # not a pitch, or not strictly ascending
        if m is None:
            self.chord += (key,)
            return self._chord_can_tie()
        pitches = frozenset((*self.chord, key))
        self.chord, self.mode = None, tb.BODY if self.tuplet is None else tb.TUP
        return self._add_event(pitches, lx.dur_value(m.group(2), m.group(3)), bool(m.group(4)))

    def _chord_can_tie(self) -> bool:
        """A chord in progress can still take a pending tie: it holds a tied pitch, or one
        lies above its last pitch (the rest of the chord ascends from there)."""
        if self.tie is None or self.tie & frozenset(self.chord):
            return True
        return bool(self.tie) and max(self.tie) > self.chord[-1]

    def _add_event(self, pitches: frozenset, length: Fraction, tied: bool) -> bool:
        if self.tie is not None and not (self.tie & pitches):
            return False
        self.tie = pitches if tied else None
        self.mark, self.rest = -1, not pitches
        self.bar_events += 1
        self.clef_pending, self.last_change = False, -1
        limit = self.room()
        if self.tuplet is not None:
            self.inner += length
            self.count += 1
            if limit is None:
                return True
            n, m = self.tuplet
            return self.bar + self.inner * m / n <= limit
        self.bar += length
        return limit is None or self.bar <= limit

    def _full(self) -> bool:
        """A `|` now would pass its bar check (what it checks besides the bar's length, a
        caller has)."""
        limit = self.room()
        return limit is None or self.bar == limit

    def _may_end(self) -> bool:
        """The text may end after this bar's events (and a bar line of an ending type)."""
        if self.tie is not None or self.slur:
            return False
        return self.bars > 0 or self.pickup is None or self.bar == self.pickup

    def _bar_check(self) -> bool:
        if not self.bar_events or self.clef_pending:
            return False
        expected = self.room()
        if expected is None:  # no time signature known: the first full bar sets the measure
            self.measure = expected = self.bar
        if self.bar != expected:
            return False
        self.bars += 1
        self.bar, self.bar_events, self.last_change = Fraction(0), 0, -1
        return True

    def _change(self, cmd: str) -> bool:
        at_start = self.bar_events == 0
        if at_start and self.bars == 0:
            return False  # the header states the first bar's clef, key and time
        if cmd != "\\clef" and not at_start:
            return False
        if at_start and self.last_change >= ORDER[cmd]:
            return False
        if self.clef_pending:
            return False
        self.change_start = at_start
        self.mode = {"\\clef": tb.CCLEF, "\\key": tb.CTONIC, "\\time": tb.CTIME}[cmd]
        return True
