"""Eighth triplets, dotted pairs and cut time written into train systems (score_data.triplets,
score_data.dotted, score_data.cut_time): where they go, what they keep, and that only train
systems of real music get them."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
from pydantic import ValidationError

from sonfolio.config.data import ScoreData
from sonfolio.config.params import Params
from sonfolio.score.common import canonical as cn
from sonfolio.score.common.canonical import System
from sonfolio.score.data.dataset import plan, split_of
from sonfolio.score.data.rhythms import middle, with_cut_time, with_dotted, with_triplets

REEL = (
    "\\clef treble \\key d \\major \\time 4/4 \\partial 4 a'8 b'8 | "
    "d''8 a'8 fis'8 a'8 d'4 fis'8 a'8 | b'8 b'8 a'4 g'8 ( fis'8 ) e'8 d'8 | "
    "fis'8 -. a'8 d''8 fis''8~ fis''4 e''8 cis''8"
)
TUPLET = re.compile(r"\\tuplet 3/2 \{ (\S+) (\S+) (\S+) \}")


def _untripled(text: str) -> str:
    """The text with each triplet put back as the two eighths it was made of."""
    return TUPLET.sub(lambda m: f"{m.group(1)} {m.group(3)}", text)


def test_a_beat_of_two_eighths_becomes_a_triplet_and_the_rest_stays():
    out = with_triplets(REEL, None, random.Random(0), per_beat=1.0)
    assert out is not None and cn.is_canonical(out)
    # every bar still adds up, and nothing but the rewritten beats changed
    assert cn.bar_lengths(out) == cn.bar_lengths(REEL)
    assert _untripled(out) == REEL
    triplets = TUPLET.findall(out)
    # the beats that qualify: in bar 1 all three of eighths, in bar 2 b'-b' and e'-d' (not
    # g'8 ( fis'8 ): a slur), in bar 3 the last (not fis'8 -., a mark; not d''8 fis''8~, a tie);
    # never the pickup
    assert triplets == [
        ("d''8", "cis''8", "a'8"),  # a passing note, as D major spells it (not c'')
        ("fis'8", "g'8", "a'8"),
        ("fis'8", "g'8", "a'8"),
        ("b'8", "cis''8", "b'8"),  # the same note twice: the step above
        ("e'8", "e'8", "d'8"),  # a step apart: the first note again
        ("e''8", "d''8", "cis''8"),
    ]
    assert "\\partial 4 a'8 b'8 |" in out and "g'8 ( fis'8 )" in out
    assert "fis'8 -. a'8" in out and "fis''8~ fis''4" in out


DOTTED = re.compile(r"(\S+)8\. (\S+)16(?= |$)")


def test_a_beat_of_two_eighths_becomes_a_dotted_pair_and_the_rest_stays():
    out = with_dotted(REEL, None, random.Random(0), per_beat=1.0)
    assert out is not None and cn.is_canonical(out)
    assert cn.bar_lengths(out) == cn.bar_lengths(REEL)
    # the same beats as the triplets' qualify, and only the lengths change
    assert DOTTED.sub(lambda m: f"{m.group(1)}8 {m.group(2)}8", out) == REEL
    assert DOTTED.findall(out) == [
        ("d''", "a'"), ("fis'", "a'"), ("fis'", "a'"), ("b'", "b'"), ("e'", "d'"), ("e''", "cis''"),
    ]  # fmt: skip
    assert "\\partial 4 a'8 b'8 |" in out and "g'8 ( fis'8 )" in out
    # per_beat below 1: some beats, at least one, and the same ones for the same seed
    some = with_dotted(REEL, None, random.Random(5), per_beat=0.3)
    assert some is not None and 1 <= len(DOTTED.findall(some)) < 6
    assert some == with_dotted(REEL, None, random.Random(5), per_beat=0.3)


def test_middle_notes_follow_the_key():
    assert cn.header_key(REEL) == ("d", "major")
    assert cn.header_key("\\clef bass \\key bes \\minor f8") == ("bes", "minor")
    assert middle("d'", "fis'", {"f": 1, "c": 1}) == "e'"
    assert middle("a'", "cis''", {"f": 1, "c": 1}) == "b'"
    assert middle("b'", "d''", {"f": 1, "c": 1}) == "cis''"
    assert middle("f'", "d'", {"b": -1}) == "e'"
    assert middle("b'", "b'", {"b": -1}) == "c''"
    assert middle("c'", "b", {}) == "c'"


@pytest.mark.parametrize(
    "text",
    [
        "\\clef treble \\key g \\major \\time 6/8 d'8 e'8 fis'8 g'8 a'8 b'8",  # compound meter
        "\\clef treble \\key g \\major \\time 2/4 d'8 e'8~ e'8 fis'8",  # a tie out of the beat
        "\\clef treble \\key g \\major \\time 2/4 \\tuplet 3/2 { d'8 e'8 fis'8 } g'8 a'8",
        "\\clef treble \\key g \\major \\time 2/4 d'8 ( e'8 ) fis'8 -> g'8",  # marks on both
        "\\clef treble \\key g \\major \\time 2/4 d'4 e'4",  # no eighths
        "\\clef treble \\key g \\major \\time 2/4 \\partial 4 d'8 e'8",  # a pickup only
    ],
)
def test_no_rewrite_where_the_beat_does_not_allow_one(text):
    assert cn.is_canonical(text)
    assert with_triplets(text, None, random.Random(0), per_beat=1.0) is None
    assert with_dotted(text, None, random.Random(0), per_beat=1.0) is None


def test_a_continuation_line_reads_the_time_in_force():
    line = "\\clef bass \\key f \\major f8 a8 c'8 a8 | bes2"
    assert with_triplets(line, "6/8", random.Random(0), per_beat=1.0) is None
    out = with_triplets(line, "2/4", random.Random(0), per_beat=1.0)
    assert out is not None and cn.is_canonical(out, "2/4")
    assert _untripled(out) == line


def test_a_printed_four_four_becomes_cut_time_and_the_rest_stays():
    out = with_cut_time(REEL, None, random.Random(0))
    assert out == REEL.replace("\\time 4/4", "\\time 2/2")
    assert cn.is_canonical(out) and cn.header_time(out) == "2/2"
    # a system printing another meter, or none (a continuation line), is left
    assert with_cut_time(REEL.replace("4/4", "3/4").replace("\\partial 4 a'8 b'8 |", ""), None,
                         random.Random(0)) is None  # fmt: skip
    assert with_cut_time("\\clef treble \\key d \\major d''2 a'2", "4/4", random.Random(0)) is None


def _systems() -> list[tuple[System, str]]:
    body = "d''8 a'8 fis'8 a'8 d'4 fis'8 a'8 | b'8 b'8 a'4 g'8 fis'8 e'8 d'8"
    text = f"\\clef treble \\key d \\major \\time 4/4 {body}"
    systems = [(System(text, f"folk/tune{i}", 0), "folk") for i in range(40)]
    systems += [(System(text, f"irish/tune{i}", 0), "irish") for i in range(5)]
    systems += [(System(text, f"synth/{i}", 0), "synthetic") for i in range(10)]
    return systems


@pytest.mark.parametrize(
    "share,count",
    [
        ("triplets", "triplet_systems"),
        ("dotted", "dotted_systems"),
        ("cut_time", "cut_time_systems"),
    ],
)
def test_only_train_systems_of_real_music_get_the_rhythms(params: Params, share, count):
    off = {"triplets": 0.0, "dotted": 0.0, "cut_time": 0.0}
    cfg = params.score_data.model_copy(update={**off, share: 1.0})
    made: Counter[str] = Counter()
    entries = plan(_systems(), cfg, made)
    original = _systems()[0][0].text
    changed = [e for e in entries if e.text != original]
    assert changed and all(e.split == "train" and e.collection == "folk" for e in changed)
    assert made[count] == len(changed) and sum(made.values()) == len(changed)
    trained = [e for e in entries if e.split == "train" and e.collection == "folk"]
    assert len(changed) == len(trained)  # every one has a beat that qualifies
    for e in entries:
        if e.split != "train" or e.collection == "synthetic":
            assert e.text == original, e
    assert {e.split for e in entries if e.collection == "irish"} == {"heldout"}
    assert any(split_of(f"folk/tune{i}", "folk", cfg.split) != "train" for i in range(40))
    # seeded: the same systems give the same texts
    assert [e.text for e in plan(_systems(), cfg)] == [e.text for e in entries]
    # off: nothing changes
    off = plan(_systems(), cfg.model_copy(update={share: 0.0}))
    assert all(e.text == original for e in off)


def test_triplets_and_dotted_pairs_drawn_apart(params: Params):
    """Both on: each drawn on its own (a share of about a half each here), a system may get
    both, and the triplets drawn are the ones drawn with dotted pairs off."""
    both = params.score_data.model_copy(update={"triplets": 0.5, "dotted": 0.5})
    made: Counter[str] = Counter()
    entries = plan(_systems(), both, made)
    alone = plan(_systems(), both.model_copy(update={"dotted": 0.0}))
    with_tuplet = [e.image for e in entries if "\\tuplet" in e.text]
    assert with_tuplet == [e.image for e in alone if "\\tuplet" in e.text]
    assert made["triplet_systems"] == len(with_tuplet) > 0
    dotted = [e for e in entries if DOTTED.search(e.text)]
    assert made["dotted_systems"] == len(dotted) > 0
    trained = sum(e.split == "train" and e.collection == "folk" for e in entries)
    assert len(with_tuplet) < trained and len(dotted) < trained
    for e in entries:  # every bar still adds up
        assert cn.is_canonical(e.text), e


def test_the_share_is_a_fraction(params: Params):
    data = params.score_data.model_dump()
    for share in ("triplets", "dotted", "cut_time"):
        with pytest.raises(ValidationError, match=share):
            ScoreData.model_validate({**data, share: 1.5})
