"""Decoding constrained by the canonical grammar: every text a model writes validates.

`State` reads a text a piece at a time (a character, a tokenizer piece such as "Ġfis''4.") and
says whether the prefix read so far can still become a text that `canonical.validate(text,
time)` accepts (`feed` returns None when it cannot) and whether it is one as it stands
(`complete`). On a whole text it agrees with `validate` exactly (tests/score/test_constrained.py
checks the grammar's own lists, synthetic systems and random mutations of both).

How it reads. The text is a sequence of space-separated tokens; the state holds what the
parser knows after the completed tokens (mode: what token may come next; clef, key, time,
measure, pickup, the bar's length, a pending tie, a tuplet or chord in progress) and the
partial last token. Format 3's markings add to it: whether a slur is open; the rank of the last
marking the event just read took (articulations, a dynamic, `)`, `(` in that order, each once;
none right after anything but an event or its markings) and whether that event was a rest
(`\\fermata` only); a grace group in progress (its count, at most 4, untied and unmarked notes
and chords, no rests), after which only the note or chord it ornaments may come (mode
AFTER_GRACE; a pending tie passes over the group to it); a bar line's place: `\\bar ".|:"`
opening the body (modes START, HBAR: right after the header, `\\partial` included), any type
after a bar's last event and its markings right before a `|` (AFTER_BAR), an ending type
(`":|."` `"||"` `"|."`) ending the text.
`complete` is false while a slur is open, after a grace group, after a `\\bar ".|:"` or
`":..:"`. A completed token goes through the same checks as canonical's parser, in its push
form, so a token that `validate` would reject kills the state at once; so does a bar already
longer than its measure (no continuation can shorten it), a `\\bar` that neither a `|` (its bar
not full) nor the text's end (a tie or slur pending, or a non-ending type) can follow, and a
grace group in a bar with no room left for its note. The partial token is checked
against the set of every prefix of the tokens the mode allows (tables built once), refined: a
prefix with few completions (under 64: "fis''4" can only become "fis''4", "fis''4.", ...) is
checked exactly, each completion run through the parser; one that can only become an event is
dead when even its shortest completion overflows the bar, or when none of its pitches can take
a pending tie. Any other partial token is judged viable when some token of the mode extends it
(the exact check comes when it completes), so a decoder can still meet a dead end, rarely.
One gap is left viable on purpose: a pickup bar that needs a length no sum of events can make
(a `\\partial 4*1/97`) is not foreseen.

Cost: a step carries the state forward (nothing is re-parsed), so it does not grow with the
prefix; `State.step(vocab, id)` caches each child per state, which the CTC beam search, trying
the same extensions frame after frame, relies on. Measured figures: benchmarks/constrained.py.

Two decoders use it, written here because no installed library does either on these models:
- `ctc_decode`: a CTC prefix beam search (Graves 2012, Hannun et al. 2014) over the CTC head's
  log-probabilities that extends a prefix only with a piece the grammar allows; pyctcdecode and
  torchaudio's decoder take word lexicons and n-gram LMs, not a grammar over a byte-level BPE.
  Beside it the greedy reading is repaired token by token (`repair`: a short bar filled, an
  overflowing event shortened, a missed bar line written...), and the reading the CTC head
  makes likelier (`ctc_logp`) is returned: the search alone drops whole bars after a misread
  duration (counted as `repaired` where the repair wins).
- `GreedyConstraint`: greedy attention decoding that picks the best-scoring token keeping the
  prefix viable and the end token only when the prefix is complete; the ORT loop
  (sonfolio.infer.ortloop.OrtGreedy) calls it each step, and `LogitsProcessor` wraps it for
  transformers' `generate` (which does not run on the ORT loop's sessions).

When nothing complete is found (a model stuck in a dead end, or out of tokens), the best
prefix is cut back to its last complete point (counted as `cut_back`); when even that is
empty, the decoder returns no tokens (counted as `empty`): the empty text, which `validate`
rejects, so callers see it as a failed reading; nothing is invented.
"""

from __future__ import annotations

import atexit
import functools
import math
import multiprocessing
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from sonfolio import parallel
from sonfolio.score import canonical as cn

# What may come next (the parser's position). H*: the header; C*: a change's arguments.
(
    HCLEF_CMD,
    HCLEF,
    HKEY_CMD,
    HTONIC,
    HMODE,
    AFTER_KEY,
    HTIME,
    AFTER_TIME,
    HPARTIAL,
    BODY,
    CCLEF,
    CTONIC,
    CMODE,
    CTIME,
    RATIO,
    OPEN,
    TUP,
    CHORD,
    START,
    HBAR,
    BAR,
    AFTER_BAR,
    GOPEN,
    GRACE,
    GCHORD,
    AFTER_GRACE,
) = range(26)
# START: the body's first token after a \partial (a `\bar ".|:"` may open it); HBAR, BAR: the
# type of a header or in-body `\bar`; AFTER_BAR: the `|` a mid-text `\bar` stands before;
# GOPEN, GRACE, GCHORD: a grace group's `{`, its notes and `}`, a chord in it; AFTER_GRACE: the
# note or chord a grace group ornaments.

_ORDER = {cmd: i for i, cmd in enumerate(cn._CHANGE_ORDER)}  # \clef 0, \key 1, \time 2
_MARK_RANK = cn._MARK_RANK  # a marking's place in the order after an event
_FERMATA = "\\fermata"  # the one marking a rest takes
_BAR_TYPES, _BAR_ENDS = frozenset(cn.BAR_TYPES), frozenset(cn.BAR_END_TYPES)
_BAR_STARTS = frozenset(cn.BAR_START_TYPES)
_SHORTEST = min(cn.duration_value(d) for d in cn.DURATIONS)  # 1/64: the shortest event
# Prefixes of a \partial argument: D, D., D.., D*N, D*N/M (canonical's _PARTIAL), cut anywhere.
_PARTIAL_PREFIX = re.compile(
    r"(?:3|6|(?:1|2|4|8|16|32|64)\.{0,2}(?:\*(?:[1-9][0-9]*(?:/(?:[1-9][0-9]*)?)?)?)?)?"
)


# A partial token with at most this many completions is checked exactly (each completion run
# through the parser): a few µs each, and it removes most dead ends a decoder could walk into.
_EXACT_BELOW = 64


@dataclass(frozen=True)
class _Lex:
    """What a partial token can still become, in one mode."""

    completions: tuple[str, ...] | None  # every token it can become, where there are few
    events_only: bool  # every completion is a note, rest or chord end
    min_len: Fraction | None  # the shortest of those events' lengths (whole notes)
    pitches: frozenset  # the pitch keys its completions hold (a pending tie needs one of them)


def _pitches() -> list[str]:
    marks = ["", *("'" * k for k in range(1, cn.MAX_UP_OCTAVES + 1))]
    marks += ["," * k for k in range(1, cn.MAX_DOWN_OCTAVES + 1)]
    return [s + a + m for s in cn._STEPS for a in cn._ALTER for m in marks]


def _table(tokens: dict[str, Fraction | None]) -> dict[str, _Lex]:
    """Every prefix ("" included) of `tokens` (token -> its event length, None: no event)."""
    info: dict[str, list] = {}  # prefix -> [completions, non-event, min length, pitches]
    for tok, length in tokens.items():
        pitch = _token_pitch(tok)
        for i in range(len(tok) + 1):
            e = info.setdefault(tok[:i], [[], False, None, set()])
            e[0].append(tok)
            e[3] |= pitch
            if length is None:
                e[1] = True
            else:
                e[2] = length if e[2] is None else min(e[2], length)
    return {
        p: _Lex(tuple(c) if len(c) <= _EXACT_BELOW else None, not other, m, frozenset(ps))
        for p, (c, other, m, ps) in info.items()
    }


def _token_pitch(tok: str) -> frozenset:
    """The pitch key a lexicon token holds (a note; a chord's start, pitch or end); none for
    rests and the rest."""
    key = _pitch_key(tok.lstrip("<").split(">")[0])
    if key is None:
        ev = _event(tok)
        return frozenset() if ev is None else ev[0]
    return frozenset((key,))


@functools.cache
def _lexicon() -> dict[int, dict[str, _Lex]]:
    """Prefix tables per mode (built once: ~0.3 s; HPARTIAL uses _PARTIAL_PREFIX instead)."""
    pitches = _pitches()
    durs = {d: cn.duration_value(d) for d in cn.DURATIONS}
    events: dict[str, Fraction | None] = {}
    for p in pitches:
        events["<" + p] = None  # a chord's first pitch: its length comes at its end
        for d, length in durs.items():
            events[p + d] = events[p + d + "~"] = length
    notes = {t: length for t, length in events.items() if not t.startswith("<")}
    events.update({"r" + d: length for d, length in durs.items()})
    marks = dict.fromkeys(cn.MARKINGS)
    body_tokens = {
        **events,
        "|": None,
        **dict.fromkeys(cn._CHANGE_ORDER),
        "\\tuplet": None,
        "\\bar": None,
        **dict.fromkeys(cn.GRACES),
        **marks,
    }
    body = _table(body_tokens)
    chord: dict[str, Fraction | None] = dict.fromkeys(pitches)
    grace_chord: dict[str, Fraction | None] = dict.fromkeys(pitches)
    for p in pitches:
        for d, length in durs.items():
            chord[p + ">" + d] = chord[p + ">" + d + "~"] = length
            grace_chord[p + ">" + d] = None  # grace notes last nothing and take no tie
    # a grace group's notes: untied, no length (a bar check skips them), no rests
    grace = {t: None for t in notes if not t.endswith("~")}
    grace.update({"<" + p: None for p in pitches})
    grace["}"] = None
    times = [f"{n}/{d}" for n in range(1, cn.MAX_TIME_NUMERATOR + 1) for d in cn.DURATION_BASES]
    top = cn.MAX_TUPLET_NUMBER + 1
    ratios = [f"{n}/{m}" for n in range(1, top) for m in range(1, top) if n != m]
    clefs, tonics = _table(dict.fromkeys(cn.CLEFS)), _table(dict.fromkeys(cn.MAJOR_TONICS))
    major, time_table = _table({"\\major": None}), _table(dict.fromkeys(times))
    return {
        HCLEF_CMD: _table({"\\clef": None}),
        HCLEF: clefs,
        HKEY_CMD: _table({"\\key": None}),
        HTONIC: tonics,
        HMODE: major,
        AFTER_KEY: body,
        HTIME: time_table,
        AFTER_TIME: _table({**body_tokens, "\\partial": None}),
        BODY: body,
        CCLEF: clefs,
        CTONIC: tonics,
        CMODE: major,
        CTIME: time_table,
        RATIO: _table(dict.fromkeys(ratios)),
        OPEN: _table({"{": None}),
        TUP: _table({**events, "}": None, **marks}),
        CHORD: _table(chord),
        START: body,
        HBAR: _table(dict.fromkeys(cn.BAR_START_TYPES)),
        BAR: _table(dict.fromkeys(cn.BAR_TYPES)),
        AFTER_BAR: _table({"|": None}),
        GOPEN: _table({"{": None}),
        GRACE: _table(grace),
        GCHORD: _table(grace_chord),
        AFTER_GRACE: _table({**notes, **{"<" + p: None for p in pitches}}),
    }


@functools.lru_cache(maxsize=65536)
def _event(tok: str) -> tuple[frozenset, Fraction, bool] | None:
    """A note or rest token -> (pitches, length, tied); None when it is neither."""
    if (m := cn._NOTE.fullmatch(tok)) is not None:
        return (
            frozenset((cn.pitch_order(m.group(1)),)),
            cn._dur_value(m.group(2), m.group(3)),
            bool(m.group(4)),
        )
    if (m := cn._REST.fullmatch(tok)) is not None:
        return frozenset(), cn._dur_value(m.group(1), m.group(2)), False
    return None


@functools.lru_cache(maxsize=4096)
def _pitch_key(name: str) -> tuple[int, int] | None:
    return cn.pitch_order(name) if cn._PITCH.fullmatch(name) is not None else None


@functools.lru_cache(maxsize=1024)
def _time(tok: str) -> Fraction | None:
    """A time signature token's measure, as canonical's time_arg reads it; None: not one."""
    m = cn._FRACTION.fullmatch(tok)
    if m is None or int(m.group(1)) > cn.MAX_TIME_NUMERATOR:
        return None
    if int(m.group(2)) not in cn.DURATION_BASES:
        return None
    return Fraction(int(m.group(1)), int(m.group(2)))


def _partial(tok: str, measure: Fraction) -> Fraction | None:
    """A \\partial argument's length, as canonical's partial_arg checks it; None: rejected."""
    m = cn._PARTIAL.fullmatch(tok)
    if m is None:
        return None
    length = cn._dur_value(m.group(1), m.group(2)) * int(m.group(3) or 1) / int(m.group(4) or 1)
    try:
        if cn.partial_token(length) != tok:
            return None
    except ValueError:
        return None
    return length if length < measure else None


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
        s.mode, s.partial = HCLEF_CMD, ""
        s.ctx_time, s.ctx_measure = time, None if time is None else cn.time_measure(time)
        s.clef = s.key = s.tonic = s.time = ""
        s.measure = s.pickup = None
        s.bar, s.bar_events, s.bars = Fraction(0), 0, 0
        s.tie = None  # pitches of a pending tie
        s.last_change = -1  # the last change at this bar's start (_ORDER), -1: none
        s.change_start = s.clef_pending = False
        s.tuplet, s.inner, s.count = None, Fraction(0), 0  # (N, M) of an open tuplet
        s.chord = None  # the pitch keys of a chord in progress
        s.slur = False  # a slur is open
        # the rank (canonical._MARK_RANK) of the last marking the event just read took, -1:
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
        if s.mode == AFTER_BAR:  # a text may end on a bar line of an ending type only
            if not s.bar_end:
                return False
        elif s.mode != BODY:
            return False
        if not s.bar_events or s.tie is not None or s.clef_pending or s.slur:
            return False
        if s.bars == 0 and s.pickup is not None:
            return s.bar == s.pickup
        return True  # an overfull last bar was caught when its event completed

    def _limit(self) -> Fraction | None:
        return self.pickup if (self.bars == 0 and self.pickup is not None) else self.measure

    def _viable_partial(self) -> bool:
        p = self.partial
        if self.mode == HPARTIAL:
            return _PARTIAL_PREFIX.fullmatch(p) is not None
        if self.mode == GRACE and self.grace == cn.MAX_GRACE_EVENTS:
            return p in ("", "}")  # a full grace group: only its end may come
        lex = _lexicon()[self.mode].get(p)
        if lex is None:
            return False
        if lex.completions is not None:  # few: check each exactly
            return any(self.copy()._take(t) for t in lex.completions)
        if self.mode in (CHORD, GCHORD):
            # its pitches ascend: a completion must lie above the last
            last, tie = self.chord[-1], self.tie if self.mode == CHORD else None
            if tie is None or tie & frozenset(self.chord):
                return any(k > last for k in lex.pitches)
            top = max(tie, default=last)  # and at or below a tied pitch, while none is held
            return any(last < k <= top for k in lex.pitches)
        if not lex.events_only:
            return True
        if self.tie is not None and self.mode != CHORD and not (self.tie & lex.pitches):
            return False
        if lex.min_len is not None and (limit := self._limit()) is not None:
            if self.tuplet is not None:
                n, m = self.tuplet
                return self.bar + (self.inner + lex.min_len) * m / n <= limit
            return self.bar + lex.min_len <= limit
        return True

    # --- one completed token, as canonical._Parser checks it ---

    def _take(self, tok: str) -> bool:
        """Apply one whole token; False when `validate` would reject it (or the bar is already
        longer than it may be). Mutates the state."""
        mode = self.mode
        if mode in (BODY, TUP):
            return self._body(tok)
        if mode == CHORD:
            return self._chord(tok)
        if mode in (GRACE, GCHORD):
            return self._grace(tok)
        if mode == AFTER_GRACE:  # the ornamented note or chord
            self.mode = BODY
            if tok[:1] == "<":
                return self._chord_start(tok)
            ev = _event(tok)
            return ev is not None and bool(ev[0]) and self._add_event(*ev)  # no rest
        if mode == AFTER_BAR:
            self.mode = BODY
            return tok == "|" and self._bar_check()
        if mode == AFTER_KEY:
            if tok == "\\time":
                self.mode = HTIME
                return True
            if tok == "\\partial":
                return False
            if self.ctx_time is not None:
                self.time, self.measure = self.ctx_time, self.ctx_measure
            mode = START
        elif mode == AFTER_TIME:
            if tok == "\\partial":
                self.mode = HPARTIAL
                return True
            mode = START
        if mode == START:  # the body's first token: a start repeat may open it
            if tok == "\\bar":
                self.mode = HBAR
                return True
            self.mode = BODY
            return self._body(tok)
        return self._argument(mode, tok)

    def _argument(self, mode: int, tok: str) -> bool:
        """Header tokens and the arguments of changes and tuplets."""
        if mode == HCLEF_CMD:
            self.mode = HCLEF
            return tok == "\\clef"
        if mode == HCLEF:
            self.clef, self.mode = tok, HKEY_CMD
            return tok in cn.CLEFS
        if mode == HKEY_CMD:
            self.mode = HTONIC
            return tok == "\\key"
        if mode in (HTONIC, CTONIC):
            self.tonic, self.mode = tok, HMODE if mode == HTONIC else CMODE
            return tok in cn.MAJOR_TONICS
        if mode == HMODE:
            self.key, self.mode = self.tonic, AFTER_KEY
            return tok == "\\major"
        if mode == HTIME:
            self.measure, self.time, self.mode = _time(tok), tok, AFTER_TIME
            return self.measure is not None
        if mode == HPARTIAL:
            self.pickup, self.mode = _partial(tok, self.measure), START
            return self.pickup is not None
        if mode == HBAR:
            self.mode = BODY
            return tok in _BAR_STARTS
        if mode == BAR:  # kept only when the `|` after it or the text's end can follow
            self.mode, self.bar_end = AFTER_BAR, tok in _BAR_ENDS
            return tok in _BAR_TYPES and (self._full() or (self.bar_end and self._may_end()))
        if mode == GOPEN:
            self.grace, self.mode = 0, GRACE
            return tok == "{"
        if mode == CCLEF:
            if tok not in cn.CLEFS or tok == self.clef:
                return False
            self.clef, self.clef_pending, self.mode = tok, not self.change_start, BODY
            if self.change_start:
                self.last_change = 0
            return True
        if mode == CMODE:
            if tok != "\\major" or self.tonic == self.key:
                return False
            self.key, self.last_change, self.mode = self.tonic, 1, BODY
            return True
        if mode == CTIME:
            measure = _time(tok)
            if measure is None or tok == self.time:
                return False
            self.measure, self.time, self.last_change, self.mode = measure, tok, 2, BODY
            return True
        if mode == RATIO:
            m = cn._FRACTION.fullmatch(tok)
            if m is None or m.group(1) == m.group(2):
                return False
            n, d = int(m.group(1)), int(m.group(2))
            self.tuplet, self.mode = (n, d), OPEN
            return max(n, d) <= cn.MAX_TUPLET_NUMBER
        # OPEN
        self.inner, self.count, self.mode = Fraction(0), 0, TUP
        return tok == "{"

    def _body(self, tok: str) -> bool:
        """A token in a bar (mode BODY) or inside a tuplet (TUP)."""
        rank = _MARK_RANK.get(tok)
        if rank is not None:
            return self._marking(tok, rank)
        self.mark = None  # markings follow only an event (or its markings)
        if self.mode == TUP:
            if tok == "}":
                if not self.count:
                    return False
                n, m = self.tuplet
                self.bar += self.inner * m / n
                self.tuplet, self.mode = None, BODY
                return True
            if tok in ("|", "{") or tok.startswith("\\"):
                return False
        elif tok == "|":
            return self._bar_check()
        elif tok in _ORDER:
            return self._change(tok)
        elif tok == "\\tuplet":
            self.mode = RATIO
            return True
        elif tok == "\\bar":  # after the bar's last event, before a `|` or the text's end
            self.mode = BAR
            if not self.bar_events or self.clef_pending:
                return False
            return self._full() or self._may_end()
        elif tok in cn.GRACES:  # the note it ornaments must still fit in the bar
            self.mode = GOPEN
            limit = self._limit()
            return limit is None or self.bar + _SHORTEST <= limit
        if tok[:1] == "<":
            return self._chord_start(tok)
        ev = _event(tok)
        return ev is not None and self._add_event(*ev)

    def _chord_start(self, tok: str) -> bool:
        first = tok[1:]
        if cn._CHORD_END.fullmatch(first) is not None:
            return False  # a one-pitch chord
        key = _pitch_key(first)
        if key is None:
            return False
        self.chord, self.mode = (key,), CHORD
        return self._chord_can_tie()

    def _marking(self, tok: str, rank: int) -> bool:
        """A marking after an event: in canonical's order, each kind once; a rest takes only
        \\fermata. A `)` needs an open slur begun on an earlier event: one begun on this event
        took its `(` last, after which the order admits no `)`."""
        if self.mark is None or rank <= self.mark or (self.rest and tok != _FERMATA):
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
        """A token of a grace group (modes GRACE, GCHORD): up to MAX_GRACE_EVENTS untied
        notes and chords, then `}`; they last nothing and leave a pending tie alone."""
        if self.mode == GCHORD:
            m = cn._CHORD_END.fullmatch(tok)
            key = _pitch_key(m.group(1) if m is not None else tok)
            if key is None or key <= self.chord[-1]:
                return False
            if m is None:
                self.chord += (key,)
                return True
            self.chord, self.mode = None, GRACE
            return not m.group(4)
        if tok == "}":
            self.mode = AFTER_GRACE
            return self.grace > 0
        if self.grace == cn.MAX_GRACE_EVENTS:
            return False
        self.grace += 1
        if tok[:1] == "<":
            key = _pitch_key(tok[1:])  # None for a one-pitch chord too
            if key is None:
                return False
            self.chord, self.mode = (key,), GCHORD
            return True
        ev = _event(tok)
        return ev is not None and bool(ev[0]) and not ev[2]

    def _chord(self, tok: str) -> bool:
        m = cn._CHORD_END.fullmatch(tok)
        key = _pitch_key(m.group(1) if m is not None else tok)
        if key is None or key <= self.chord[-1]:
            return False  # not a pitch, or not strictly ascending
        if m is None:
            self.chord += (key,)
            return self._chord_can_tie()
        pitches = frozenset((*self.chord, key))
        self.chord, self.mode = None, BODY if self.tuplet is None else TUP
        return self._add_event(pitches, cn._dur_value(m.group(2), m.group(3)), bool(m.group(4)))

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
        limit = self._limit()
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
        limit = self._limit()
        return limit is None or self.bar == limit

    def _may_end(self) -> bool:
        """The text may end after this bar's events (and a bar line of an ending type)."""
        if self.tie is not None or self.slur:
            return False
        return self.bars > 0 or self.pickup is None or self.bar == self.pickup

    def _bar_check(self) -> bool:
        if not self.bar_events or self.clef_pending:
            return False
        expected = self._limit()
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
        if at_start and self.last_change >= _ORDER[cmd]:
            return False
        if self.clef_pending:
            return False
        self.change_start = at_start
        self.mode = {"\\clef": CCLEF, "\\key": CTONIC, "\\time": CTIME}[cmd]
        return True


def accepts(text: str, time: str | None = None) -> bool:
    """`canonical.is_canonical` by way of `State` (a character at a time): for the tests."""
    state: State | None = State.start(time)
    for ch in text:
        state = state.feed(ch)
        if state is None:
            return False
    return state.complete


class Vocab:
    """A tokenizer's pieces as text, for `State.step` (built once per tokenizer).

    `pieces[id]` is the exact text the id decodes to (the byte-level decoder's output for the
    id alone; "Ġfis''4." reads " fis''4."); None for the special tokens, which never stand in a
    text. A piece holding a byte that is not ASCII decodes to U+FFFD, which no text allows.
    """

    def __init__(self, tokenizer: Any) -> None:
        special = set(tokenizer.all_special_ids)
        self.pieces: list[str | None] = [
            None
            if i in special
            else tokenizer.decode(
                [i], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            for i in range(len(tokenizer))
        ]
        self.eos: int = tokenizer.eos_token_id
        self.blank: int | None = tokenizer.pad_token_id
        self._tokenizer = tokenizer
        self.key = hash(tuple(self.pieces))  # names its search pool (one per vocabulary)

    def text(self, ids: Sequence[int]) -> str:
        return "".join(p for i in ids if (p := self.pieces[i]) is not None)

    def ids(self, text: str) -> list[int]:
        """The tokenizer's own ids for `text` (no special tokens)."""
        return self._tokenizer(text, add_special_tokens=False)["input_ids"]


@dataclass(frozen=True)
class Carry:
    """Decode rows in order, each in the time in force after the one before (a page's systems
    top to bottom): `start` is the first row's time."""

    start: str | None = None


def next_time(text: str, time: str | None) -> str | None:
    """The time in force after a system read in `time`: canonical.time_after for a valid
    text; an invalid one tells nothing reliable, so `time` carries on."""
    try:
        return cn.time_after(text, time)
    except cn.CanonicalError:
        return time


# --- CTC ---

_NEG = -math.inf


def _logadd(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    if b == _NEG:
        return a
    return a + math.log1p(math.exp(b - a))


class _Node:
    """A prefix in the beam search's trie: its state and its children are made once."""

    __slots__ = ("parent", "token", "state", "length", "children")

    def __init__(self, parent: _Node | None, token: int, state: State, length: int) -> None:
        self.parent, self.token, self.state, self.length = parent, token, state, length
        self.children: dict[int, _Node | None] = {}

    def child(self, vocab: Vocab, token: int) -> _Node | None:
        if token in self.children:
            return self.children[token]
        state = self.state.step(vocab, token)
        node = None if state is None else _Node(self, token, state, self.length + 1)
        self.children[token] = node
        return node

    def ids(self) -> list[int]:
        out, node = [], self
        while node.parent is not None:
            out.append(node.token)
            node = node.parent
        return out[::-1]


@dataclass(frozen=True)
class CtcSearch:
    """The constrained CTC search's knobs (defaults: measured in benchmarks/constrained.py)."""

    # measured on 200 test systems of the format-2 default model (SER; greedy: 0.393, invalid
    # 94 %): beam 6 / top 8: 0.473, 41 ms a system; 12 / 12: 0.440, 92 ms; 16 / 16: 0.429,
    # 128 ms; 32 / 16: 0.412, 258 ms. 16 / 16 keeps the main command within its hour.
    beam: int = 16  # prefixes kept per frame
    top_k: int = 16  # a frame's best tokens tried on each prefix
    min_logp: float = -8.0  # tokens less likely than e^-8 at a frame are not tried
    # a frame that emits (blank below 1/2) where a prefix may take none of the tried tokens
    # extends it by the best token the grammar allows among this many (a v1 model's `\\minor`
    # becomes `\\major` so); the whole vocabulary by default
    rescue: int | None = None


def ctc_decode(
    logits: np.ndarray,
    vocab: Vocab,
    blank: int,
    times: Sequence[str | None] | Carry | None,
    limit: int | None = None,
    search: CtcSearch = CtcSearch(),
    stats: Counter | None = None,
    workers: int = 1,
) -> list[list[int]]:
    """Token ids per row whose text validates, from CTC logits (B, T, V).

    Greedy first (best label per frame, repeats merged, blanks dropped): when its text
    validates it is returned as is (`stats["greedy_valid"]`); otherwise the constrained prefix
    beam search (`stats["searched"]`). `times`: per row the time in force (or a Carry).
    `workers` > 1: the searches of rows with a known time run in that many processes (a
    `Carry`'s rows wait on the row before, so they run here, in order).
    """
    stats = Counter() if stats is None else stats
    logits = np.asarray(logits, dtype=np.float32)
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)  # (B, T, V)
    best = logp.argmax(-1)  # (B, T)
    if not isinstance(times, Carry):
        return _decode_rows(logp, best, vocab, blank, times, limit, search, stats, workers)
    rows: list[list[int]] = []
    time = times.start
    for b in range(len(logp)):
        ids = _greedy(best[b], blank, limit)
        if cn.is_canonical(vocab.text(ids), time):
            stats["greedy_valid"] += 1
        else:
            stats["searched"] += 1
            ids = _search(logp[b], ids, vocab, blank, time, limit, search, stats)
        rows.append(ids)
        time = next_time(vocab.text(ids), time)
    return rows


def _greedy(best: np.ndarray, blank: int, limit: int | None) -> list[int]:
    """One row's greedy reading: its best labels, repeats merged, blanks dropped."""
    return best[(best != blank) & np.r_[True, best[1:] != best[:-1]]][:limit].tolist()


def _decode_rows(
    logp: np.ndarray,
    best: np.ndarray,
    vocab: Vocab,
    blank: int,
    times: Sequence[str | None] | None,
    limit: int | None,
    search: CtcSearch,
    stats: Counter,
    workers: int,
) -> list[list[int]]:
    """ctc_decode of rows each in its own known time: the searches are independent, so with
    `workers` > 1 (and more than one to do) they run in the search pool."""
    rows: list[list[int]] = []
    jobs = []
    for b in range(len(logp)):
        time = None if times is None else times[b]
        ids = _greedy(best[b], blank, limit)
        if cn.is_canonical(vocab.text(ids), time):
            stats["greedy_valid"] += 1
        else:
            stats["searched"] += 1
            jobs.append((b, (logp[b], ids, blank, time, limit, search)))
        rows.append(ids)
    if workers > 1 and len(jobs) > 1:
        found = _search_pool(vocab, workers).starmap(_search_job, [args for _, args in jobs])
    else:
        found = []
        for _, (row, greedy, *rest) in jobs:
            counts: Counter = Counter()
            found.append((_search(row, greedy, vocab, *rest, counts), counts))
    for (b, _), (ids, counts) in zip(jobs, found, strict=True):
        rows[b] = ids
        stats.update(counts)
    return rows


# Worker processes for the searches, one pool per vocabulary and size, kept for the process's
# life (a variant after another with the same tokenizer reuses it) and closed at exit. Written
# with multiprocessing.Pool, not sonfolio.parallel.pool_map: a search is a short pure-Python
# task with no time limit to enforce, called once per batch, and a pool started per batch would
# cost more than the searches it shares out.
_POOLS: dict[tuple[int, int], Any] = {}
_WORKER_VOCAB: Vocab | None = None


def _search_pool(vocab: Vocab, workers: int) -> Any:
    key = (vocab.key, workers)
    pool = _POOLS.get(key)
    if pool is None:
        if not _POOLS:
            atexit.register(close_search_pools)
        # fork: the workers inherit the imported modules (as sonfolio.parallel's); they run
        # only this module's pure-Python search, never the parent's inference threads' code
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(workers, initializer=_search_worker, initargs=(vocab,))
        _POOLS[key] = pool
    return pool


def close_search_pools() -> None:
    """Stop the search processes (at exit; tests call it to start afresh)."""
    while _POOLS:
        _, pool = _POOLS.popitem()
        pool.terminate()
        pool.join()


def _search_worker(vocab: Vocab) -> None:
    global _WORKER_VOCAB
    parallel.worker_signals()
    _WORKER_VOCAB = vocab


def _search_job(
    logp: np.ndarray,
    greedy: list[int],
    blank: int,
    time: str | None,
    limit: int | None,
    search: CtcSearch,
) -> tuple[list[int], Counter]:
    if _WORKER_VOCAB is None:
        raise RuntimeError("a search job ran outside a search pool's worker")
    stats: Counter = Counter()
    return _search(logp, greedy, _WORKER_VOCAB, blank, time, limit, search, stats), stats


def _search(
    logp: np.ndarray,
    greedy: list[int],
    vocab: Vocab,
    blank: int,
    time: str | None,
    limit: int | None,
    search: CtcSearch,
    stats: Counter,
) -> list[int]:
    """The likelier (under the CTC head) of two valid readings of a row whose greedy reading
    does not validate: the constrained beam search's, and the greedy reading repaired
    (`repair`). The search alone loses whole bars: once a misread duration leaves a bar short,
    the grammar refuses the `|` the model writes, and no later frame offers another `|`, so
    the best prefix it keeps ends there (a third of the test systems lost 40 % of their
    symbols so)."""
    found = _beam(logp, vocab, blank, time, limit, search, stats)
    fixed = repair(vocab.text(greedy), time)
    if fixed is None:
        return found
    fixed_ids = vocab.ids(fixed)
    if limit is not None and len(fixed_ids) > limit:
        return found
    if not found or ctc_logp(logp, fixed_ids, blank) > ctc_logp(logp, found, blank):
        stats["repaired"] += 1
        return fixed_ids
    return found


def ctc_logp(logp: np.ndarray, ids: Sequence[int], blank: int) -> float:
    """log P(ids | frames) under CTC (every alignment summed), from (T, V) log-probabilities;
    -inf where the frames cannot hold the ids."""
    import torch  # here: the grammar and the search need no torch (importing this module
    # stays light for the data stage, which validates texts with it)

    if not ids:
        return float(logp[:, blank].sum())
    loss = torch.nn.functional.ctc_loss(
        torch.from_numpy(np.ascontiguousarray(logp))[:, None, :],
        torch.tensor([list(ids)]),
        torch.tensor([logp.shape[0]]),
        torch.tensor([len(ids)]),
        blank=blank,
        reduction="sum",
    )
    return -float(loss)


# --- repairing a greedy reading ---


def _event_end(tok: str) -> tuple[str, str, str] | None:
    """(head, duration, tie) of an event's last token (a note, a rest, a chord's end), by
    canonical's own patterns; None for any other token."""
    if m := cn._NOTE.fullmatch(tok):
        return m[1], m[2] + m[3], m[4]
    if m := cn._CHORD_END.fullmatch(tok):
        return m[1] + ">", m[2] + m[3], m[4]
    if m := cn._REST.fullmatch(tok):
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
        limit = s._limit()
        if limit is None or s.tuplet is not None or s.mode not in (BODY, AFTER_BAR):
            return None
        return limit - s.bar

    def fill() -> bool:  # the bar's missing length, by lengthening its last event or rests
        left = room()
        if not left or left < 0:
            return False
        if out and (event := _event_end(out[-1])):
            head, dur, tie = event
            longer = cn.duration_token(cn.duration_value(dur) + left)
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
        if cn._PITCH.fullmatch(tok) and push(tok + last_dur):  # read without its duration
            continue
        if event is None:
            continue  # refused and not an event: dropped
        if room() == 0 and push("|"):  # a missed bar line
            i -= 1
            continue
        left = room()
        if left and left > 0 and (fits := cn.duration_token(left)) is not None:
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
    return tuple(sorted(((cn.duration_value(t), t) for t in cn.DURATIONS), reverse=True))


def _rests(length: Fraction) -> list[str] | None:
    """Rests that add up to `length`, longest first; None where none can."""
    out = []
    for value, tok in _longest_first():
        while value <= length:
            out.append(f"r{tok}")
            length -= value
    return out if length == 0 else None


def _beam(
    logp: np.ndarray,
    vocab: Vocab,
    blank: int,
    time: str | None,
    limit: int | None,
    search: CtcSearch,
    stats: Counter,
) -> list[int]:
    """The constrained prefix beam search over one row's (T, V) log-probabilities."""
    root = _Node(None, -1, State.start(time), 0)
    beam: dict[_Node, tuple[float, float]] = {root: (0.0, _NEG)}  # node -> (blank, non-blank)
    k = min(search.rescue or logp.shape[1], logp.shape[1])
    for frame in logp:
        top = np.argpartition(-frame, search.top_k)[: search.top_k]
        top = top[np.argsort(-frame[top])].tolist()  # the frame's best, best first
        tried = [c for c in top if c != blank and frame[c] >= search.min_logp]
        emits = frame[blank] < math.log(0.5)  # the model writes a token here
        order = None
        nxt: dict[_Node, list[float]] = {}
        add = functools.partial(_add, nxt)

        for node, (pb, pnb) in beam.items():
            total = _logadd(pb, pnb)
            add(node, total + float(frame[blank]), _NEG)
            extended = False
            for c in tried:
                y = float(frame[c])
                if c == node.token:  # a repeat merges unless a blank came between
                    add(node, _NEG, pnb + y)
                    base = pb
                else:
                    base = total
                if limit is not None and node.length >= limit:
                    continue
                child = node.child(vocab, c)
                if child is not None:
                    add(child, _NEG, base + y)
                    extended = True
            if emits and not extended and (limit is None or node.length < limit):
                if order is None:  # sorted once a frame, and only where needed
                    order = np.argsort(-frame)[:k].tolist()
                for c in order[search.top_k :]:  # the best token the grammar allows here
                    if c != blank and c != node.token and (child := node.child(vocab, c)):
                        add(child, _NEG, total + float(frame[c]))
                        break
        ranked = sorted(nxt.items(), key=lambda kv: -_logadd(*kv[1]))
        beam = {n: (v[0], v[1]) for n, v in ranked[: search.beam]}
    ids = _final(beam, stats)
    if not ids:  # nothing complete in the beam: follow the frames one by one instead
        ids = _frame_greedy(logp, vocab, blank, root, limit, search)
        stats["frame_greedy" if ids else "empty"] += 1
    return ids


def _frame_greedy(
    logp: np.ndarray, vocab: Vocab, blank: int, root: _Node, limit: int | None, search: CtcSearch
) -> list[int]:
    """The last resort when the beam holds nothing complete (its prefixes all stuck on tokens
    the grammar refuses): every frame that emits a new token gives the best token the grammar
    allows there, so the prefix never stalls; cut back to its last complete point."""
    node, prev = root, blank
    k = min(search.rescue or logp.shape[1], logp.shape[1])
    for frame in logp:
        best = int(frame.argmax())
        if best in (blank, prev):
            prev = best
            continue
        prev = best
        if limit is not None and node.length >= limit:
            break
        for c in np.argsort(-frame)[:k].tolist():
            if c != blank and (child := node.child(vocab, c)) is not None:
                node = child
                break
    while node is not None and not node.state.complete:
        node = node.parent
    return [] if node is None else node.ids()


def _add(beam: dict[_Node, list[float]], node: _Node, pb: float, pnb: float) -> None:
    """Sum (blank, non-blank) log-probabilities into a prefix of the next frame's beam."""
    e = beam.get(node)
    if e is None:
        beam[node] = [pb, pnb]
    else:
        e[0], e[1] = _logadd(e[0], pb), _logadd(e[1], pnb)


def _final(beam: dict[_Node, tuple[float, float]], stats: Counter) -> list[int]:
    """The best complete prefix; else the best one cut back to its last complete point."""
    ranked = sorted(beam, key=lambda n: -_logadd(*beam[n]))
    for node in ranked:
        if node.state.complete:
            return node.ids()
    node = ranked[0]
    while node is not None and not node.state.complete:
        node = node.parent
    if node is None:
        return []  # the caller tries the frames one by one, and counts
    stats["cut_back"] += 1
    return node.ids()


# --- attention decoding ---


class GreedyConstraint:
    """Constrained greedy choice for a batch decoded step by step (the ORT loop, HF generate).

    `choose(logits)` takes the step's (B, V) scores and returns the ids picked: per row the
    best-scoring token whose piece keeps the prefix viable, the end token only when the prefix
    is complete; a row with no allowed token ends. `finish(rows)` cuts a row that ended
    incomplete back to its last complete point (or to nothing). Counted in `stats`: complete,
    cut_back, empty.
    """

    def __init__(
        self,
        vocab: Vocab,
        times: Sequence[str | None] | None,
        batch: int,
        stats: Counter | None = None,
    ) -> None:
        self.vocab, self.eos = vocab, vocab.eos
        self.stats = Counter() if stats is None else stats
        self.states: list[State | None] = [
            State.start(None if times is None else times[b]) for b in range(batch)
        ]
        self.steps = [0] * batch  # tokens chosen per row
        self.complete_at = [0] * batch  # the length of the longest complete prefix
        self.done = [False] * batch

    def choose(self, logits: np.ndarray) -> np.ndarray:
        picks = np.full(len(self.states), self.eos, dtype=np.int64)
        for b, state in enumerate(self.states):
            if self.done[b]:
                continue
            row = logits[b]
            pick = self._best(state, row, int(row.argmax()))
            if pick is None:
                pick = next(
                    (c for c in np.argsort(-row, kind="stable").tolist() if self._ok(state, c)),
                    self.eos,
                )
            picks[b] = pick
            if pick == self.eos:
                self.done[b] = True
                continue
            self.states[b] = state.step(self.vocab, pick)
            self.steps[b] += 1
            if self.states[b].complete:
                self.complete_at[b] = self.steps[b]
        return picks

    def _best(self, state: State, row: np.ndarray, top: int) -> int | None:
        return top if np.isfinite(row[top]) and self._ok(state, top) else None

    def _ok(self, state: State, token: int) -> bool:
        if token == self.eos:
            return state.complete
        return state.step(self.vocab, token) is not None

    def finish(self, rows: list[list[int]]) -> list[list[int]]:
        """Rows (the chosen ids, end token and padding included or not) cut to their last
        complete point where they did not end complete."""
        out = []
        for b, ids in enumerate(rows):
            ids = [i for i in ids if i != self.eos][: self.steps[b]]
            if self.complete_at[b] < len(ids) or not ids:
                ids = ids[: self.complete_at[b]]
                self.stats["empty" if not ids else "cut_back"] += 1
            else:
                self.stats["complete"] += 1
            out.append(ids)
        return out


def logits_processor(constraint: GreedyConstraint) -> Any:
    """A transformers LogitsProcessor applying `constraint` inside `model.generate` (greedy):
    every score but the chosen token's is set to -inf."""
    import torch
    from transformers import LogitsProcessor

    class _Processor(LogitsProcessor):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            # generate calls this once a step with the ids so far (the start token first); the
            # constraint already advanced its states by the token it chose last step
            picks = constraint.choose(scores.float().cpu().numpy())
            out = torch.full_like(scores, -math.inf)
            rows = torch.arange(len(picks), device=scores.device)
            out[rows, torch.as_tensor(picks, device=scores.device)] = 0.0
            return out

    return _Processor()
