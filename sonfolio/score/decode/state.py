"""The canonical grammar read a piece at a time: `State`, the grammar's one parser
(sonfolio.score.common.token_state.TokenState) with the partial last token, which decoding
under the grammar runs so that every text a model writes validates.

`State` reads a text a piece at a time (a character, a tokenizer piece such as "Ġfis''4.") and
says whether the prefix read so far can still become a text that `canonical.validate(text,
time)` accepts (`feed` returns None when it cannot) and whether it is one as it stands
(`complete`). Its checks are the ones `validate` runs (canonical.Reader is the same parser), so
the two agree on every text (tests/score/test_constrained.py checks them on the grammar's own
lists, synthetic systems and random mutations of both).

How it reads, what it refuses at once and what it leaves viable, and what a step costs:
docs/canonical-lilypond.md, "Decoding under the grammar".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sonfolio.score.common import lexicon as lx
from sonfolio.score.common import modes as md
from sonfolio.score.common.token_state import TokenState
from sonfolio.score.decode.tables import PARTIAL_PREFIX, token_tables

if TYPE_CHECKING:
    from sonfolio.score.decode.vocab import Vocab

_new = object.__new__


class State(TokenState):
    """The canonical parser's state after a prefix of a text, copied on every step.

    Build the first one with `State.start(time)`; `feed(text)` and `step(vocab, id)` return the
    next state, or None when no text starting with the prefix can validate.
    """

    __slots__ = ("partial", "children", "_complete")  # the last two: caches, never copied
    prune = True  # a decoder must not walk into a dead end

    @classmethod
    def start(cls, time: str | None = None) -> State:
        """Before the first character; `time` as `canonical.validate` takes it.

        Raises:
            ValueError: `time` is not a time signature N/D.
        """
        s = super().start(time)
        s.partial, s.children, s._complete = "", None, None
        return s

    def copy(self) -> State:
        """Every field but the caches, written out one a line (0.5 µs: a loop over the slots
        takes 3.9, tuples assigned 0.7; tests/score/test_constrained.py checks that none is
        left out)."""
        s = _new(State)
        s.mode = self.mode
        s.partial = self.partial
        s.ctx_time = self.ctx_time
        s.ctx_measure = self.ctx_measure
        s.clef = self.clef
        s.key = self.key
        s.tonic = self.tonic
        s.time = self.time
        s.measure = self.measure
        s.pickup = self.pickup
        s.bar = self.bar
        s.bar_events = self.bar_events
        s.bars = self.bars
        s.tie = self.tie
        s.last_change = self.last_change
        s.change_start = self.change_start
        s.clef_pending = self.clef_pending
        s.tuplet = self.tuplet
        s.inner = self.inner
        s.count = self.count
        s.chord = self.chord
        s.slur = self.slur
        s.mark = self.mark
        s.rest = self.rest
        s.grace = self.grace
        s.bar_end = self.bar_end
        s.children = s._complete = None
        return s

    def identity(self) -> tuple:
        """Every field `copy` copies, written out as there: two states with equal identities
        read every text alike (`step`'s `table` keeps one of them)."""
        return (
            self.mode,
            self.partial,
            self.ctx_time,
            self.ctx_measure,
            self.clef,
            self.key,
            self.tonic,
            self.time,
            self.measure,
            self.pickup,
            self.bar,
            self.bar_events,
            self.bars,
            self.tie,
            self.last_change,
            self.change_start,
            self.clef_pending,
            self.tuplet,
            self.inner,
            self.count,
            self.chord,
            self.slur,
            self.mark,
            self.rest,
            self.grace,
            self.bar_end,
        )

    # --- reading pieces ---

    def step(self, vocab: Vocab, token: int, table: dict | None = None) -> State | None:
        """The state after one tokenizer piece (cached per state); None: dead or special.

        `table` (identity -> state, kept by the caller): a new state equal to one already in it is
        replaced by that one, so prefixes that end alike share one state and its cache. A
        search's prefixes differ in a few tokens and mostly end alike: measured on 96 systems
        of the default model's beam search, half of its steps were so, and sharing them made
        the search 2.2x faster, its readings the same."""
        if self.children is None:
            self.children = {}
        elif token in self.children:
            return self.children[token]
        piece = vocab.pieces[token]
        child = None if piece is None else self.feed(piece)
        if child is not None and table is not None:
            child = table.setdefault(child.identity(), child)
        self.children[token] = child
        return child

    def feed(self, text: str) -> State | None:
        """The state after `text` (any characters); None when the prefix cannot validate."""
        s = self.copy()
        parts = text.split(" ")
        for part in parts[:-1]:  # each space completes the token before it
            tok = s.partial + part
            if not tok or not s.take(tok):  # an empty token: a leading or doubled space
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
        return s.take(self.partial) is True and s.finish() is True

    def _viable_partial(self) -> bool:
        p = self.partial
        if self.mode == md.HPARTIAL:
            return PARTIAL_PREFIX.fullmatch(p) is not None
        if self.mode == md.GRACE and self.grace == lx.MAX_GRACE_EVENTS:
            return p in ("", "}")  # a full grace group: only its end may come
        lex = token_tables()[self.mode].get(p)
        if lex is None:
            return False
        if lex.completions is not None:  # few: check each exactly
            return any(self.copy().take(t) for t in lex.completions)
        if self.mode in (md.CHORD, md.GCHORD):
            # its pitches ascend: a completion must lie above the last
            last, tie = self.chord[-1], self.tie if self.mode == md.CHORD else None
            if tie is None or tie & frozenset(self.chord):
                return any(k > last for k in lex.pitches)
            top = max(tie, default=last)  # and at or below a tied pitch, while none is held
            return any(last < k <= top for k in lex.pitches)
        if not lex.events_only:
            return True
        if self.tie is not None and self.mode != md.CHORD and not (self.tie & lex.pitches):
            return False
        if lex.min_len is not None and (limit := self.room()) is not None:
            if self.tuplet is not None:
                n, m = self.tuplet
                return self.bar + (self.inner + lex.min_len) * m / n <= limit
            return self.bar + lex.min_len <= limit
        return True
