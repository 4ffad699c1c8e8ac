"""The canonical grammar's one parser, token by token: `TokenState` holds what the parser
knows after the tokens read so far (mode: what token may come next; clef, key, time, measure,
pickup, the bar's length, a pending tie, a tuplet, chord or grace group in progress, the
markings and slur) and checks each next token (`take`) and the text's end (`finish`).

A check that fails returns a `refusals.Why`: falsy and as cheap as False, it says why only when
asked. Two readers extend it: sonfolio.score.decode.state.State, which the decoders feed a
piece at a time (and which refuses at once what no text can go on from: `prune`), and
`canonical.Reader`, which `validate` runs over a whole text, naming the first refusal.
docs/canonical-lilypond.md ("Errors", "Decoding under the grammar") says how it reads.
"""

from __future__ import annotations

import re
from fractions import Fraction

from sonfolio.score.common import lexicon as lx
from sonfolio.score.common import modes as md
from sonfolio.score.common import refusals as no
from sonfolio.score.common.modes import (
    BAR_ENDS,
    BAR_STARTS,
    BAR_TYPES,
    FERMATA,
    MARK_RANK,
    ORDER,
    SHORTEST,
    event_of,
    partial_length,
    pitch_key,
    time_length,
    time_measure,
)


class TokenState:
    """The canonical parser's state after whole tokens. `TokenState.start(time)`, then `take`
    each token (True, or why `validate` rejects it; the state is changed either way), then
    `finish` (True, or why the text may not end there)."""

    __slots__ = (
        "mode",
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
    )
    # Refuse a token as soon as no text can go on from it (a bar already too long, a `\bar`
    # that neither `|` nor the end may follow, ...): what a decoder needs (decode.state.State
    # turns it on). Off, `validate` names each fault where the text breaks.
    prune = False

    @classmethod
    def start(cls, time: str | None = None) -> TokenState:
        """Before the first token; `time` as `canonical.validate` takes it.

        Raises:
            ValueError: `time` is not a time signature N/D.
        """
        s = cls.__new__(cls)
        s.mode = md.HCLEF_CMD
        s.ctx_time, s.ctx_measure = time, None if time is None else time_measure(time)
        s.clef = s.key = s.tonic = s.time = ""
        s.measure = s.pickup = None
        s.bar, s.bar_events, s.bars = Fraction(0), 0, 0
        s.tie = None  # pitches of a pending tie
        s.last_change = -1  # the last change at this bar's start (ORDER), -1: none
        s.change_start = s.clef_pending = False
        s.tuplet, s.inner, s.count = None, Fraction(0), 0  # (N, M) of an open tuplet
        s.chord = None  # the pitch keys of a chord in progress
        s.slur = False  # a slur is open
        # the rank (lexicon.MARK_RANK) of the last marking the event just read took, -1:
        # none yet; None: the last token was no event or marking, so no marking may come
        s.mark = None
        s.rest = False  # the last event was a rest (it takes only \fermata)
        s.grace = 0  # events in the grace group being read
        s.bar_end = False  # the in-body \bar just read may end the text (an ending type)
        return s

    def room(self) -> Fraction | None:
        """How long the bar in progress may grow: the pickup in a first bar that has one, else
        the measure (None: unknown until the first full bar)."""
        return self.pickup if (self.bars == 0 and self.pickup is not None) else self.measure

    def expects(self) -> str:
        """What a text that ends here lacks (for the message)."""
        return md.EXPECTS[self.mode]

    def take(self, tok: str) -> bool | no.Why:
        """Apply one whole token (mutates the state): True, or why `validate` would reject it
        (with `prune`, also a token after which no text can validate)."""
        mode = self.mode
        if mode in (md.BODY, md.TUP):
            return self._body(tok)
        if mode == md.CHORD:
            return self._chord(tok)
        if mode in (md.GRACE, md.GCHORD):
            return self._grace(tok)
        if mode == md.AFTER_GRACE:  # the ornamented note or chord
            self.mode = md.BODY
            if tok[:1] == "<":
                return self._chord_start(tok)
            ev = event_of(tok)
            if ev is None or not ev[0]:  # no rest
                return no.GRACE_FOLLOW
            return self._add_event(*ev)
        if mode == md.AFTER_BAR:
            self.mode = md.BODY
            return self.bar_check() if tok == "|" else no.BAR_FOLLOW
        if mode == md.AFTER_KEY:
            if tok == "\\time":
                self.mode = md.HTIME
                return True
            if self.ctx_time is not None:
                self.time, self.measure = self.ctx_time, self.ctx_measure
            mode = md.START
        elif mode == md.AFTER_TIME:
            if tok == "\\partial":
                self.mode = md.HPARTIAL
                return True
            mode = md.START
        if mode == md.START:  # the body's first token: a start repeat may open it
            if tok == "\\bar":
                self.mode = md.HBAR
                return True
            if tok == "\\partial":  # a pickup right after the header's \time only
                return no.PICKUP_OPENS
            self.mode = md.BODY
            return self._body(tok)
        if mode in md.HEADER:
            return self._argument(mode, tok)
        return self._change_argument(mode, tok)

    def _argument(self, mode: int, tok: str) -> bool | no.Why:
        """The header's tokens, and the key and time signature a change states (read alike)."""
        if mode == md.HCLEF_CMD:
            self.mode = md.HCLEF
            return True if tok == "\\clef" else no.EXPECTED_CLEF
        if mode == md.HCLEF:
            self.clef, self.mode = tok, md.HKEY_CMD
            return True if tok in lx.CLEFS else no.UNKNOWN_CLEF
        if mode == md.HKEY_CMD:
            self.mode = md.HTONIC
            return True if tok == "\\key" else no.EXPECTED_KEY
        if mode in (md.HTONIC, md.CTONIC):
            return self._tonic(tok, md.HMODE if mode == md.HTONIC else md.CMODE)
        if mode in (md.HMODE, md.CMODE):
            return self._key(tok, md.AFTER_KEY if mode == md.HMODE else md.BODY)
        if mode in (md.HTIME, md.CTIME):
            return self._time(tok, md.AFTER_TIME if mode == md.HTIME else md.BODY)
        # md.HPARTIAL
        pickup = partial_length(tok, self.measure)
        if isinstance(pickup, no.Why):
            return pickup
        self.pickup, self.mode = pickup, md.START
        return True

    def _tonic(self, tok: str, mode: int) -> bool | no.Why:
        """A key's tonic: with `prune`, refused at once where no key signature has it; without,
        checked with the mode after it (`_key`), which `validate` names first."""
        self.tonic, self.mode = tok, mode
        if tok in lx.MAJOR_TONICS or (not self.prune and no.take_fault(tok) is None):
            return True
        return no.KEY_TONIC

    def _key(self, tok: str, then: int) -> bool | no.Why:
        """The mode after a key's tonic, in the header (`then`: AFTER_KEY) or a change (BODY)."""
        if tok != "\\major":
            return no.KEY_MINOR if tok == "\\minor" else no.EXPECTED_MAJOR
        if self.tonic not in lx.MAJOR_TONICS:
            return no.NO_KEY
        if then == md.BODY:
            if self.tonic == self.key:
                return no.RESTATES_KEY
            self.last_change = 1
        self.key, self.mode = self.tonic, then
        return True

    def _time(self, tok: str, then: int) -> bool | no.Why:
        """A time signature, in the header (`then`: AFTER_TIME) or a change (BODY)."""
        measure = time_length(tok)
        if measure is None:
            return no.TIME_FORMAT
        if then == md.BODY:
            if tok == self.time:  # 4/4 and 2/2 last the same but are different signatures
                return no.RESTATES_TIME
            self.last_change = 2
        self.measure, self.time, self.mode = measure, tok, then
        return True

    def _change_argument(self, mode: int, tok: str) -> bool | no.Why:
        """The arguments of a clef change, tuplets, bar lines and grace groups."""
        if mode == md.BAR:  # kept only when the `|` after it or the text's end can follow
            self.mode, self.bar_end = md.AFTER_BAR, tok in BAR_ENDS
            if tok not in BAR_TYPES:
                return no.UNKNOWN_BAR
            if self._full() or (self.bar_end and self._may_end()) or not self.prune:
                return True
            return no.BAR_DEAD_END
        if mode == md.HBAR:
            self.mode = md.BODY
            if tok in BAR_STARTS:
                return True
            return no.BAR_OPENS if tok in BAR_TYPES else no.UNKNOWN_BAR
        if mode == md.GOPEN:
            self.grace, self.mode = 0, md.GRACE
            return True if tok == "{" else no.EXPECTED_OPEN
        if mode == md.CCLEF:
            if tok not in lx.CLEFS:
                return no.UNKNOWN_CLEF
            if tok == self.clef:
                return no.RESTATES_CLEF
            self.clef, self.clef_pending, self.mode = tok, not self.change_start, md.BODY
            if self.change_start:
                self.last_change = 0
            return True
        if mode == md.RATIO:
            m = lx.FRACTION.fullmatch(tok)
            if m is None or m.group(1) == m.group(2):
                return no.RATIO
            n, d = int(m.group(1)), int(m.group(2))
            self.tuplet, self.mode = (n, d), md.OPEN
            return True if max(n, d) <= lx.MAX_TUPLET_NUMBER else no.RATIO
        # md.OPEN
        self.inner, self.count, self.mode = Fraction(0), 0, md.TUP
        return True if tok == "{" else no.EXPECTED_OPEN

    def _body(self, tok: str) -> bool | no.Why:
        """A token in a bar (mode md.BODY) or inside a tuplet (md.TUP)."""
        rank = MARK_RANK.get(tok)
        if rank is not None:
            return self._marking(tok, rank)
        self.mark = None  # markings follow only an event (or its markings)
        if self.mode == md.TUP:
            if tok == "}":
                if not self.count:
                    return no.EMPTY_TUPLET
                n, m = self.tuplet
                self.bar += self.inner * m / n
                self.tuplet, self.mode = None, md.BODY
                return True
            if tok in ("|", "{") or tok.startswith("\\"):
                return no.TUPLET_ONLY
        elif tok == "|":
            return self.bar_check()
        elif tok in ORDER:
            return self._change(tok)
        elif tok == "\\tuplet":
            self.mode = md.RATIO
            return True
        elif tok == "\\bar":  # after the bar's last event, before a `|` or the text's end
            self.mode = md.BAR
            if not self.bar_events:
                return no.BAR_FIRST
            if self.clef_pending:
                return no.CLEF_NO_MUSIC
            if self._full() or self._may_end() or not self.prune:
                return True
            return no.BAR_DEAD_END
        elif tok in lx.GRACES:  # the note it ornaments must still fit in the bar
            self.mode = md.GOPEN
            limit = self.room()
            if limit is None or self.bar + SHORTEST <= limit or not self.prune:
                return True
            return no.NO_ROOM
        if tok[:1] == "<":
            return self._chord_start(tok)
        ev = event_of(tok)
        return no.NOT_EVENT if ev is None else self._add_event(*ev)

    def _chord_open(self, tok: str, mode: int) -> bool | no.Why:
        """A chord's first token `<p` (in mode CHORD, or GCHORD in a grace group)."""
        first = tok[1:]
        self.chord = ()  # a refusal names the chord from its first token: this one
        if lx.CHORD_END.fullmatch(first) is not None:
            return no.ONE_PITCH
        key = pitch_key(first)
        if key is None:
            return no.CHORD_PITCH
        self.chord, self.mode = (key,), mode
        return True

    def _chord_start(self, tok: str) -> bool | no.Why:
        why = self._chord_open(tok, md.CHORD)
        return self._chord_can_tie() if why is True else why

    def _chord_next(self, tok: str) -> re.Match | no.Why | None:
        """A chord's next token, its pitch added to `chord`: None while more pitches follow,
        the CHORD_END match of the token that ends it, or why not."""
        m = lx.CHORD_END.fullmatch(tok)
        key = pitch_key(m.group(1) if m is not None else tok)
        if key is None:
            return no.CHORD_PITCH
        if key <= self.chord[-1]:
            return no.CHORD_ORDER  # not strictly ascending
        self.chord += (key,)
        return m

    def _marking(self, tok: str, rank: int) -> bool | no.Why:
        """A marking after an event: in canonical's order, each kind once; a rest takes only
        \\fermata. A `)` needs an open slur begun on an earlier event: one begun on this event
        took its `(` last, after which the order admits no `)`."""
        if self.mark is None:
            return no.TUPLET_ONLY if self.mode == md.TUP and tok[0] == "\\" else no.MARK_FIRST
        if rank <= self.mark:
            return no.MARK_ORDER
        if self.rest and tok != FERMATA:
            return no.REST_MARK
        self.mark = rank
        if tok == ")":
            if not self.slur:
                return no.SLUR_NOT_OPEN
            self.slur = False
        elif tok == "(":
            if self.slur:
                return no.SLUR_OPEN
            self.slur = True
        return True

    def _grace(self, tok: str) -> bool | no.Why:
        """A token of a grace group (modes md.GRACE, md.GCHORD): up to MAX_GRACE_EVENTS untied
        notes and chords, then `}`; they last nothing and leave a pending tie alone."""
        if self.mode == md.GCHORD:
            m = self._chord_next(tok)
            if m is None or isinstance(m, no.Why):
                return True if m is None else m
            self.chord, self.mode = None, md.GRACE
            return no.GRACE_TIED if m.group(4) else True
        if tok == "}":
            self.mode = md.AFTER_GRACE
            return True if self.grace > 0 else no.EMPTY_GRACE
        chord = tok[:1] == "<"
        ev = None if chord else event_of(tok)
        if not chord and (ev is None or not ev[0]):
            return no.GRACE_ONLY  # no rest, no marking
        if self.grace == lx.MAX_GRACE_EVENTS:
            return no.GRACE_MAX
        self.grace += 1
        if chord:
            return self._chord_open(tok, md.GCHORD)
        return no.GRACE_TIED if ev[2] else True

    def _chord(self, tok: str) -> bool | no.Why:
        m = self._chord_next(tok)
        if m is None:
            return self._chord_can_tie()
        if isinstance(m, no.Why):
            return m
        pitches = frozenset(self.chord)
        self.chord, self.mode = None, md.BODY if self.tuplet is None else md.TUP
        return self._add_event(pitches, lx.dur_value(m.group(2), m.group(3)), bool(m.group(4)))

    def _chord_can_tie(self) -> bool | no.Why:
        """A chord in progress can still take a pending tie: it holds a tied pitch, or one
        lies above its last pitch (the rest of the chord ascends from there)."""
        if self.tie is None or self.tie & frozenset(self.chord):
            return True
        if (self.tie and max(self.tie) > self.chord[-1]) or not self.prune:
            return True
        return no.TIE_CANNOT

    def _add_event(self, pitches: frozenset, length: Fraction, tied: bool) -> bool | no.Why:
        if self.tie is not None and not (self.tie & pitches):
            return no.TIE_MISMATCH
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
            if self.bar + self.inner * m / n <= limit or not self.prune:
                return True
            return no.OVERFULL
        self.bar += length
        return True if limit is None or self.bar <= limit or not self.prune else no.OVERFULL

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

    def bar_check(self) -> bool | no.Why:
        """A `|`: the bar it ends must hold music and last its measure (canonical.Reader and
        compile_check's bar-tolerant reader extend it)."""
        if not self.bar_events:
            return no.EMPTY_BAR
        if self.clef_pending:
            return no.CLEF_BEFORE_CHECK
        expected = self.room()
        if expected is None:  # no time signature known: the first full bar sets the measure
            self.measure = expected = self.bar
        if self.bar != expected:
            return no.BAR_LENGTH
        self.bars += 1
        self.bar, self.bar_events, self.last_change = Fraction(0), 0, -1
        return True

    def _change(self, cmd: str) -> bool | no.Why:
        at_start = self.bar_events == 0
        if at_start and self.bars == 0:
            return no.HEADER_STATES  # the header states the first bar's clef, key and time
        if cmd != "\\clef" and not at_start:
            return no.MID_BAR_CHANGE
        if at_start and self.last_change >= ORDER[cmd]:
            return no.CHANGE_ORDER
        if self.clef_pending:
            return no.TWO_CLEFS
        self.change_start = at_start
        self.mode = {"\\clef": md.CCLEF, "\\key": md.CTONIC, "\\time": md.CTIME}[cmd]
        return True

    def finish(self) -> bool | no.Why:
        """Whether the text may end after the tokens taken: True, or why not (checked in the
        order `validate` names them)."""
        mode = self.mode
        if mode == md.AFTER_BAR:  # a text may end on a bar line of an ending type only
            if not self.bar_end:
                return no.LINE_ENDS
        elif mode in (md.CHORD, md.GCHORD):
            return no.UNCLOSED
        elif mode in (md.TUP, md.GRACE):
            return (
                no.ENDS_EARLY
                if (self.count if mode == md.TUP else self.grace)
                else (no.EMPTY_TUPLET if mode == md.TUP else no.EMPTY_GRACE)
            )
        elif mode in md.EXPECTS:
            return no.ENDS_EARLY
        if not self.bar_events:  # (no music since the header, a `|` or a change)
            after_check = mode == md.BODY and self.bars and self.last_change < 0
            return no.NO_MUSIC_AFTER_CHECK if after_check else no.LAST_EMPTY
        if self.tie is not None:
            return no.TIED_TO_NOTHING
        if mode == md.AFTER_GRACE:
            return no.GRACE_FOLLOW
        if self.slur:
            return no.SLUR_AT_END
        if self.clef_pending:
            return no.CLEF_NO_MUSIC_END
        if self.bars == 0 and self.pickup is not None:
            return True if self.bar == self.pickup else no.PICKUP_BAR
        if self.measure is not None and self.bar > self.measure:
            return no.LAST_LONG  # (with `prune`, caught when its event completed)
        return True
