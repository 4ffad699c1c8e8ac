"""The incremental grammar state (sonfolio.score.decode.grammar's State): it agrees with
`validate` on whole texts (format 3's markings, grace groups and bar lines included) and their
mutations, every prefix of a valid text stays viable, a dead end dies at once and a completed bad
token is caught when it completes; a copy and the identity carry every field, prefixes that end
alike share one state, a refusal is a falsy Why. The decoders built on it:
tests/score/test_constrained_decode.py."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from score.test_canonical import BAD, GOOD, MARKED, MARKED_BAD  # tests/ is on sys.path

from sonfolio.score.common import canonical, lexicon
from sonfolio.score.data.synth import synth_systems
from sonfolio.score.decode.grammar import State, accepts

TIMES = [None, "3/4", "4/4", "6/8", "2/2"]
CHARS = "abcdefgis',.~<>|{}/\\r0123456789 *()-:\"^"
# Format 3's tokens, inserted anywhere by the mutations of marked texts.
MARK_TOKENS = [
    *lexicon.MARKINGS,
    "\\bar",
    *lexicon.BAR_TYPES,
    *lexicon.GRACES,
    "{",
    "}",
    "|",
    "c'16",
    "<c'",
    "e'>8",
    "r4",
]
H = r"\clef treble \key c \major \time 4/4"
BAR = {t: rf"\bar {t}" for t in lexicon.BAR_TYPES}
START, END, BOTH, DOUBLE, FINAL = (BAR[t] for t in ('".|:"', '":|."', '":..:"', '"||"', '"|."'))
NOT_A_BAR = r'\bar "|"'
# (text, whether it validates as /work/spec/markings.md says): format 3, kind by kind
FORMAT3 = [
    # every articulation and dynamic, on a note and a chord; a rest takes only \fermata
    *((rf"{H} c'4 {a} d'2. | e'1", True) for a in lexicon.ARTICULATIONS),
    *((rf"{H} <c' e'>4 {d} d'2. | e'1", True) for d in lexicon.DYNAMICS),
    *((rf"{H} c'4 r4 {m} d'2 | e'1", m == r"\fermata") for m in lexicon.MARKINGS),
    (rf"{H} c'4 -. -- -> -^ \fermata \trill \sfz ( d'2. ) | e'1", True),
    (rf"{H} c'4 -- -. d'2. | e'1", False),  # out of order
    (rf"{H} c'4 -. -. d'2. | e'1", False),  # twice
    (rf"{H} c'4 \p \f d'2. | e'1", False),  # two dynamics
    (rf"{H} c'4 \p -> d'2. | e'1", False),  # an articulation after the dynamic
    (rf"{H} c'4~ -. ( c'4 ) d'2 | e'1", True),  # the tie stays glued to its note
    (rf"{H} -. c'1", False),  # no event before it
    (rf"{H} c'1 | -. d'1", False),  # after `|`
    (rf"{H} c'2 \clef bass -. c2 | e1", False),  # after a change
    (rf"{H} \tuplet 3/2 {{ c'8 -. \p ( d'8 e'8 ) }} f'2. | e'1", True),
    (rf"{H} \tuplet 3/2 {{ -. c'8 d'8 e'8 }} f'2. | e'1", False),  # right after `{`
    (rf"{H} \tuplet 3/2 {{ c'8 d'8 e'8 }} -. f'2. | e'1", False),  # after `}`
    (rf"{H} \tuplet 3/2 {{ r8 \fermata d'8 e'8 }} f'2. | e'1", True),
    # slurs: one at a time, ended on a later event, never open at the end
    (rf"{H} c'4 ( d'4 ) ( e'4 f'4 ) | g'1", True),
    (rf"{H} c'4 ( d'4 e'4 \tuplet 3/2 {{ f'8 g'8 a'8 ) }} | g'1", True),
    (rf"{H} c'4 ( ) d'2. | e'1", False),  # ended on the event that began it
    (rf"{H} c'4 ) d'2. | e'1", False),
    (rf"{H} c'4 ( d'4 ( e'2 ) | f'1", False),
    (rf"{H} c'4 ( d'2. | e'1", False),  # open at the end
    (rf"{H} c'4 ( d'2. | e'1 ) (", False),
    (rf"{H} c'4 ( d'2. | e'1 ) {FINAL}", True),
    (rf"{H} c'4 ( r4 ) d'2 | e'1", False),  # a rest ends no slur
    (rf"{H} c'4 ( r4 d'4 ) e'4 | e'1", True),
    # grace groups
    (rf"{H} \grace {{ d'16 }} c'4 d'2. | e'1", True),
    (rf"{H} \acciaccatura {{ <d' f'>8 }} <c' e'>4 d'2. | e'1", True),
    (rf"{H} c'4 \grace {{ c'16 d'16 e'16 f'16 }} g'4 d'2 | e'1", True),
    (rf"{H} c'4 \grace {{ c'16 d'16 e'16 f'16 g'16 }} g'4 d'2 | e'1", False),  # five
    (rf"{H} c'4 \grace {{ }} d'4 d'2 | e'1", False),  # empty
    (rf"{H} c'4 \grace {{ d'16~ }} d'4 d'2 | e'1", False),  # tied
    (rf"{H} c'4 \grace {{ <d' f'>16~ }} d'4 d'2 | e'1", False),
    (rf"{H} c'4 \grace {{ d'16 -. }} d'4 d'2 | e'1", False),  # marked
    (rf"{H} c'4 \grace {{ r16 }} d'4 d'2 | e'1", False),  # a rest
    (rf"{H} c'4 \grace {{ \tuplet 3/2 {{ d'16 }} }} d'4 d'2 | e'1", False),
    (rf"{H} c'4 \grace {{ d'16 }} r4 d'2 | e'1", False),  # not followed by a note
    (rf"{H} c'4 d'2 e'4 \grace {{ d'16 }} | e'1", False),
    (rf"{H} c'4 d'2 e'4 | e'2. \grace {{ d'16 }}", False),  # at the end
    (rf"{H} c'4 \grace {{ d'16 }} \tuplet 3/2 {{ c'8 d'8 e'8 }} d'2 | e'1", False),
    (rf"{H} c'4 \grace {{ d'16 }} \grace {{ e'16 }} d'4 d'2 | e'1", False),
    (rf"{H} c'4 \grace {{ d'16 }} \clef bass d4 d2 | e1", False),
    (rf"{H} c'4 \clef bass \grace {{ d16 }} d4 d2 | e1", True),
    (rf"{H} c'4 \grace {{ d'16 }} {DOUBLE} d'4 d'2 | e'1", False),
    (rf"{H} \tuplet 3/2 {{ c'8 \grace {{ d'16 }} d'8 e'8 }} d'2. | e'1", False),
    (rf"{H} c'4~ \grace {{ d'16 }} c'4 d'2 | e'1", True),  # the tie passes over the group
    (rf"{H} c'4~ \grace {{ c'16 }} d'4 d'2 | e'1", False),
    (rf"{H} c'2 d'2 | \grace {{ d'16 }} c'4~ -- ( c'2. ) | e'1", True),
    (rf"{H} c'4 d'2 e'4 \grace {{ d'16 }} f'4 | e'1", False),  # its note overfills the bar
    # bar lines: (a) right before `|`, any type; (b) at the end, an ending type; (c) opening
    # the body, a start repeat
    *((rf"{H} c'1 {b} | d'1", True) for b in BAR.values()),
    *((rf"{H} c'1 | d'1 {b}", t in lexicon.BAR_END_TYPES) for t, b in BAR.items()),
    *((rf"{H} {b} c'1 | d'1", b == START) for b in BAR.values()),
    (rf"\clef treble \key c \major {START} c'1 | d'1", True),
    (rf"\clef treble \key c \major \time 3/4 \partial 4 {START} c'4 | d'2.", True),
    (rf"\clef treble \key c \major \time 3/4 {START} \partial 4 c'4 | d'2.", False),
    (rf"{H} {START} {START} c'1 | d'1", False),  # twice in a row
    (rf"{H} c'1 {DOUBLE} {DOUBLE} | d'1", False),
    (rf"{H} c'1 | {START} d'1", False),  # after `|`
    (rf"{H} c'2 {DOUBLE} d'2 | d'1", False),  # not followed by `|`
    (rf"{H} c'2 {DOUBLE} | d'1", False),  # the `|` still checks the bar
    (rf"{H} c'1 | d'2 {FINAL}", True),  # a short last bar
    (rf"{H} c'1 {DOUBLE}", True),
    (rf"{H} c'1 {END} |", False),
    (rf"{H} c'1 -. \p {END} | d'1 \fermata {FINAL}", True),
    (rf"{H} c'2 \clef bass {DOUBLE} | d1", False),  # after a mid-bar clef change
    (rf"{H} \tuplet 3/2 {{ c'2 d'2 {DOUBLE} e'2 }} | d'1", False),
    (rf"{H} \tuplet 3/2 {{ c'2 d'2 e'2 }} {DOUBLE} | d'1", True),
    (rf"{H} \grace {{ d'16 {DOUBLE} }} c'1 | d'1", False),
    (rf"{H} c'1~ {DOUBLE} | c'1", True),
    (rf"{H} c'1~ {DOUBLE}", False),
    (rf"{H} c'1 {START} | \key g \major d'1 {END}", True),
    (rf"{H} c'1 {BOTH} | d'1 {DOUBLE}", True),
    (rf"{H} c'1 {NOT_A_BAR} | d'1", False),  # not a bar line type
    (rf"{H} c'1 {BOTH}", False),
    (rf"\clef treble \key c \major \time 3/4 \partial 4 c'4 {DOUBLE} | d'2.", True),
    (rf"\clef treble \key c \major \time 3/4 \partial 4 c'8 {FINAL}", False),
]


@pytest.fixture(scope="module")
def systems() -> list[tuple[str, str | None]]:
    """(text, time in force) of synthetic systems (continuations included) and the grammar
    tests' own texts."""
    synth = [(s.text, s.time) for s in synth_systems(120, 3, 4)]
    return synth + [(t, None) for t in GOOD] + [(b[0], None) for b in BAD]


def _mutate(rng: random.Random, text: str) -> str:
    """Drop, repeat or swap a token, or insert, drop or replace a character."""
    toks = text.split(" ")
    kind = rng.randrange(6)
    if kind == 0 and len(toks) > 1:
        del toks[rng.randrange(len(toks))]
    elif kind == 1:
        toks.insert(rng.randrange(len(toks) + 1), rng.choice(toks))
    elif kind == 2 and len(toks) > 1:
        i, j = rng.randrange(len(toks)), rng.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
    elif kind >= 3:
        i = rng.randrange(len(text) + 1)
        new = rng.choice(CHARS)
        return {3: text[:i] + new + text[i:], 4: text[:i] + text[i + 1 :]}.get(
            kind, text[:i] + new + text[i + 1 :]
        )
    return " ".join(toks)


def test_agrees_with_validate_on_the_grammar_tests_texts():
    for text in GOOD + [b[0] for b in BAD]:
        assert accepts(text) == canonical.is_canonical(text), text


def test_agrees_with_validate_and_the_spec_on_format_3_texts():
    for text in MARKED + [b[0] for b in MARKED_BAD]:
        assert accepts(text) == canonical.is_canonical(text), text
    for text, valid in FORMAT3:
        assert canonical.is_canonical(text) == valid, text  # the spec's answer
        assert accepts(text) == valid, text
        assert accepts(text, "4/4") == valid, text


def _agree(text: str, times: tuple, checked: Counter) -> None:
    """The state machine accepts `text` in each time exactly when validate does (counted)."""
    for t in times:
        valid = canonical.is_canonical(text, t)
        assert accepts(text, t) == valid, (text, t)
        checked[valid] += 1


def test_agrees_with_validate_on_mutations_of_marked_texts():
    rng = random.Random(3)
    texts = MARKED + [t for t, valid in FORMAT3 if valid]
    checked = Counter()
    for text in texts:
        for _ in range(40):
            if rng.random() < 0.5:  # a format-3 token (or a bar check, a note) anywhere
                toks = text.split(" ")
                toks.insert(rng.randrange(len(toks) + 1), rng.choice(MARK_TOKENS))
                mutated = " ".join(toks)
            else:
                mutated = _mutate(rng, _mutate(rng, text) if rng.random() < 0.3 else text)
            _agree(mutated, (None, rng.choice(TIMES)), checked)
    assert checked[True] > 300 and checked[False] > 3000  # both sides exercised


def _state(text: str) -> State | None:
    state = State.start()
    for ch in text:
        state = state.feed(ch)
        if state is None:
            return None
    return state


def test_complete_only_where_a_text_may_end():
    ends = {
        rf"{H} c'4 ( d'2.": False,  # a slur open
        rf"{H} c'4 ( d'2. )": True,
        rf"{H} c'4 \p (": False,
        rf"{H} c'4 -.": True,
        rf"{H} c'4 \grace {{ d'16 }}": False,  # a grace group waits for its note
        rf"{H} c'4 \grace {{ d'16 }} e'4": True,
        rf"{H} c'1 {START}": False,  # a start repeat prints at the next line's start
        rf"{H} c'1 {BOTH}": False,
        rf"{H} c'1 {END}": True,
        rf"{H} c'1 {FINAL}": True,
        rf"{H} {START}": False,
    }
    for text, complete in ends.items():
        assert _state(text).complete is complete, text
        assert canonical.is_canonical(text) is complete, text


def test_dead_ends_of_format_3_die_at_once():
    """A bar line that neither a `|` nor the text's end can follow, a grace group whose note
    cannot fit: no text goes on from there, so the state dies there, not later."""
    for text in (
        rf"{H} c'2 {START}",  # the bar is not full, so `|` cannot follow; nor the end
        rf"{H} c'2 ( d'4 {FINAL}",  # nor the text's end: a slur is open
        rf"{H} c'4~ \bar",  # nor the end, with a tie pending
        r"\clef treble \key c \major \time 3/4 \partial 4 c'8 \bar",  # nor the pickup's end
        rf"{H} c'4 d'2 e'4 \grace",  # a full bar: no room for the ornamented note
        rf"{H} c'4 \grace {{ d'16~",
        rf"{H} c'4 ( )",
        rf"{H} r4 -.",
    ):
        assert _state(text) is None, text
    for bar in (DOUBLE, FINAL, END):  # a short last bar may end on an ending bar line
        assert _state(rf"{H} c'2 {bar}").complete


def test_a_copy_carries_every_field():
    state = _state(rf"{H} c'4~ -. ( \tuplet 3/2 {{ c'8 d'8 <e'")
    copy = state.copy()
    # the parser's fields (TokenState's) and the partial token; not the caches
    fields = [n for c in State.__mro__ for n in getattr(c, "__slots__", ())]
    fields.remove("children")
    fields.remove("_complete")
    assert len(fields) == 26 and "partial" in fields and "chord" in fields
    assert all(getattr(copy, n) is getattr(state, n) for n in fields)


def test_identity_holds_every_field_a_copy_carries():
    """State.step's table shares one state among prefixes with equal identities: a field left
    out of the identity would let a prefix take another's cache (and its refusals)."""
    state = _state(rf"{H} c'4~ -. ( \tuplet 3/2 {{ c'8 d'8 <e'")
    fields = [n for c in State.__mro__ for n in getattr(c, "__slots__", ())]
    fields.remove("children")
    fields.remove("_complete")
    assert len(state.identity()) == len(fields)
    for name in fields:
        other = state.copy()
        setattr(other, name, object())  # equal to nothing else
        assert other.identity() != state.identity(), name
    assert state.copy().identity() == state.identity()


def test_prefixes_that_end_alike_share_one_state(vocab):
    """Two readings that differ in an earlier bar reach one state (and one cache) through a
    table; without it each has its own."""
    table: dict = {}
    ends = []
    for text in (rf"{H} c'4 d'4 e'4 f'4 | g'1", rf"{H} c'4 d'4 e'4 g'4 | g'1"):
        with_table, without = State.start(), State.start()
        for i in vocab.ids(text):
            with_table = with_table.step(vocab, i, table)
            without = without.step(vocab, i)
        assert with_table is not None and without is not None and with_table.complete
        ends.append((with_table, without))
    assert ends[0][0] is ends[1][0]
    assert ends[0][1] is not ends[1][1] and ends[0][1].identity() == ends[1][1].identity()


def test_a_refusal_costs_a_false_and_says_why_only_in_validate():
    """The decoders' refusal is a Why, the int 0 (tested as False, equal only to itself);
    validate runs the same parser, foreseeing nothing, and names the fault where it breaks."""
    state = State.start()
    for tok in rf"{H} c'4 d'4 e'4".split(" "):
        assert state.take(tok) is True
    overfull = state.copy().take("d'2")  # the bar can no longer end at 4/4: dead at once
    short = state.take("|")
    assert not overfull and not short and overfull != short and short == short
    assert short is not False and short != False  # noqa: E712 (a Why is not False, only falsy)
    with pytest.raises(canonical.CanonicalError, match="bar 1 lasts 5/4, the measure is 1"):
        canonical.validate(rf"{H} c'4 d'4 e'4 d'2 | f'1")
    with pytest.raises(canonical.CanonicalError, match="bar 1 lasts 3/4, the measure is 1"):
        canonical.validate(rf"{H} c'4 d'4 e'4 | f'1")


def test_agrees_with_validate_on_synthetic_systems_and_their_mutations(systems):
    rng = random.Random(0)
    checked = Counter()
    for text, time in systems:
        assert accepts(text, time) == canonical.is_canonical(text, time), (text, time)
        for _ in range(12):
            mutated = _mutate(rng, _mutate(rng, text) if rng.random() < 0.3 else text)
            _agree(mutated, (time, rng.choice(TIMES)), checked)
    assert checked[True] > 100 and checked[False] > 2000  # both sides exercised


def test_every_prefix_of_a_valid_text_is_viable(systems):
    marked = [(t, None) for t in MARKED] + [(t, None) for t, valid in FORMAT3 if valid]
    for text, time in systems[:60] + marked:
        state = State.start(time)
        for i, ch in enumerate(text):
            state = state.feed(ch)
            assert state is not None, (text[: i + 1], time)
            assert state.complete == (i == len(text) - 1) or canonical.is_canonical(
                text[: i + 1], time
            )


def _dies_at(text: str, time: str | None) -> int | None:
    state = State.start(time)
    for i, ch in enumerate(text):
        state = state.feed(ch)
        if state is None:
            return i
    return None


def _detected_by(text: str, err: canonical.CanonicalError) -> int | None:
    """The last character of the token after which `validate` knew the text is bad: its
    error's token; the argument of a restated change; a chord's closing token (its errors
    name the chord's first token). None: the text merely ends too early."""
    toks = text.split(" ")
    j = err.index
    if err.token == "<end>" or j >= len(toks) - 1:
        return None  # the last token is partial: an approximate check is allowed there
    if "restates" in err.why:
        j += 2 if toks[j] == "\\key" else 1
    elif "chord" in err.why:
        j = next((k for k in range(j, len(toks)) if ">" in toks[k]), len(toks) - 1)
    if j >= len(toks) - 1:
        return None
    return sum(len(t) + 1 for t in toks[: j + 1])  # the space that completes token j


def test_a_completed_bad_token_is_caught_at_once(systems):
    rng = random.Random(1)
    caught = 0
    for text, time in systems:
        for _ in range(8):
            mutated = _mutate(rng, text)
            try:
                canonical.validate(mutated, time)
                continue
            except canonical.CanonicalError as err:
                bound = _detected_by(mutated, err)
            if bound is None:
                continue
            dies = _dies_at(mutated, time)
            assert dies is not None and dies <= bound, (mutated, time, dies, bound)
            caught += 1
    assert caught > 300


def test_an_invalid_time_is_refused_as_validate_refuses_it():
    with pytest.raises(ValueError, match="not a time signature"):
        State.start("3/5")
