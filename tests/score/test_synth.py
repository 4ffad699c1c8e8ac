"""The synthetic generator: deterministic, covers the grammar (markings included), and LilyPond
agrees with it."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from sonfolio.score.common.canonical import header_time, is_canonical, time_after
from sonfolio.score.common.lexicon import BAR_TYPES, CLEFS, DYNAMICS, KEYS, TIMES, symbols
from sonfolio.score.common.lilypond import Setting, compile_systems, find_lilypond
from sonfolio.score.data.synth import SYSTEMS_PER_PIECE, synth_systems

N = 480  # 60 pieces: every clef twice over (synth._CLEF_DECK holds 30)


@pytest.fixture(scope="module")
def systems():
    return synth_systems(N, seed=7, bars_per_system=4)


def test_same_seed_same_systems(systems) -> None:
    assert synth_systems(N, seed=7, bars_per_system=4) == systems
    # Piece k has its own random stream: asking for fewer systems gives a prefix.
    assert synth_systems(50, seed=7, bars_per_system=4) == systems[:50]
    other = synth_systems(50, seed=8, bars_per_system=4)
    assert [s.text for s in other] != [s.text for s in systems[:50]]


def test_pieces_group_systems(systems) -> None:
    assert len(systems) == N
    per_piece = Counter(s.piece for s in systems)
    assert all(re.fullmatch(r"synthetic/\d{5}", p) for p in per_piece)
    assert set(per_piece.values()) <= {SYSTEMS_PER_PIECE, N % SYSTEMS_PER_PIECE}
    assert [s.index for s in systems] == [k % SYSTEMS_PER_PIECE for k in range(N)]


def test_covers_clefs_keys_and_rhythms(systems) -> None:
    text = " ".join(s.text for s in systems)
    assert set(re.findall(r"\\clef (\S+)", text)) == set(CLEFS)
    assert set(re.findall(r"\\key (\w+) \\(major|minor)", text)) == set(KEYS)
    times = set(re.findall(r"\\time (\S+)", text)) | {s.time for s in systems if s.time}
    assert len(times) >= len(TIMES) - 2
    found = Counter(sym for s in systems for sym in symbols(s.text))
    features = {
        "32nd": r"^[a-g<].*32\.*~?$",
        "dotted": r"\d\.~?$",
        "tie": r"~$",
        "rest": r"^r\d",
        "chord": r"^<",
        "triplet": r"^\\tuplet 3/2 \{$",
        "other tuplet": r"^\\tuplet (5/4|6/4|7/4|2/3|4/3) \{$",
        "pickup": r"^\\partial ",
    }
    for name, pattern in features.items():
        assert sum(v for k, v in found.items() if re.search(pattern, k)) >= 10, name
    # Ledger lines: pitches 3 or 4 octave marks from c' (high treble, low bass staves).
    assert re.search(r"[a-g](?:is|es)*''''[\d >]", text)
    assert re.search(r"[a-g](?:is|es)*,,,[\d >]", text)
    # Accidentals beyond the key signature, double ones included.
    assert "isis" in text and "eses" in text
    # Changes inside systems: key and time at a bar start, clef also in the middle of a bar.
    assert re.search(r"\| (\\clef \S+ )?\\key ", text)
    assert re.search(r"\| (\\clef \S+ )?(\\key \S+ \\\w+ )?\\time ", text)
    assert any(re.search(r"[\d.~}] \\clef ", s.text) for s in systems)


def test_covers_every_marking_and_dense_runs(systems) -> None:
    """Every format 3 marking appears many times; runs of 16ths and 32nds reach ledger lines."""
    found = Counter(tok for s in systems for tok in s.text.split(" "))
    for tok in ("-.", "--", "->", "-^", r"\fermata", r"\trill", "(", ")"):
        assert found[tok] >= 10, tok
    assert found[r"\grace"] >= 10 and found[r"\acciaccatura"] >= 10
    for tok in DYNAMICS:
        assert found[tok] >= 1, tok  # every dynamic (the rarest drawn ~1 in 600 systems)
    for line in BAR_TYPES:
        assert found[line] >= 3, line
    text = " ".join(s.text for s in systems)
    # lines opening with a start repeat, lines ending with an end repeat or a final bar
    assert sum(bool(re.match(r'[^|]*\\bar "\.\|:"', s.text)) for s in systems) >= 10
    assert sum(s.text.endswith((r'\bar ":|."', r'\bar "|."')) for s in systems) >= 10
    # articulation runs: four notes in a row marked staccato
    assert len(re.findall(r"(?:\S+[0-9.~] -\. (?:\S+ )?){4}", text)) >= 10
    # grace groups of 1-4 notes, grace chords among them
    assert re.search(r"\\(grace|acciaccatura) \{ <", text)
    assert max(len(g.split(" ")) for g in re.findall(r"\\grace \{ ([^}]*) \}", text)) >= 4
    # beamed runs: 8 sixteenths or 32nds in a row (markings between), some far off the staff
    run = r"(?:[a-g](?:is|es)*[',]*(?:16|32) (?:[-()\\a-z.^>]+ )*){8}"
    runs = re.findall(run, text)
    assert len(runs) >= 20
    assert any(re.search(r"''''|,,,", r) for r in runs)


def test_many_seeds_and_system_lengths_validate() -> None:
    """`synth_systems` validates every text it makes (a failure raises): many seeds, and
    systems of 1 to 6 bars, with every marking among them."""
    for seed in range(12):
        synth_systems(160, seed=seed, bars_per_system=4)
    for bars in (1, 2, 3, 6):
        synth_systems(80, seed=bars, bars_per_system=bars)


def test_every_system_is_canonical(systems) -> None:
    assert all(is_canonical(s.text, s.time) for s in systems)
    assert len({s.text for s in systems}) == N


def test_only_a_piece_first_system_prints_its_time_as_on_a_page(systems) -> None:
    firsts = [s for s in systems if s.index == 0]
    assert all(s.time is None and header_time(s.text) for s in firsts)
    later = [s for s in systems if s.index > 0]
    assert all(s.time and header_time(s.text) is None for s in later)
    # each continues the one before: the time in force and the bar numbers carry on
    for before, after in zip(systems, systems[1:], strict=False):
        if after.index > 0:
            assert after.time == time_after(before.text, before.time)
            assert after.bar == before.bar + len(re.findall(r" \| ", before.text)) + 1 - (
                r"\partial" in before.text
            )


@pytest.mark.slow
def test_lilypond_compiles_them_without_warnings(systems, tmp_path: Path) -> None:
    sample = systems[:: max(1, N // 120)]  # ~120 systems: every clef, key and time among them
    settings = [Setting(s.time, s.bar) for s in sample]
    texts = [s.text for s in sample]
    result = compile_systems(texts, tmp_path, find_lilypond(), render=False, settings=settings)
    assert result.returncode == 0, result.log[-2000:]
    assert {s.text: w for s, w in zip(sample, result.warnings, strict=True) if w} == {}


@pytest.mark.slow
def test_lilypond_compiles_markings_of_other_seeds(tmp_path: Path) -> None:
    """Systems of other seeds with grace groups, a start repeat after the header, and an end
    bar line after a run of 32nds."""
    sample = []
    for seed in range(1, 6):
        made = synth_systems(80, seed=seed, bars_per_system=4)
        sample += [s for s in made if re.search(r"\\(grace|acciaccatura) ", s.text)][:4]
        sample += [s for s in made if re.match(r'[^|]*\\bar "\.\|:"', s.text)][:2]
        sample += [s for s in made if s.text.endswith('"') and "32" in s.text][:2]
    assert len(sample) >= 30
    settings = [Setting(s.time, s.bar) for s in sample]
    texts = [s.text for s in sample]
    result = compile_systems(texts, tmp_path, find_lilypond(), render=False, settings=settings)
    assert result.returncode == 0, result.log[-2000:]
    assert {s.text: w for s, w in zip(sample, result.warnings, strict=True) if w} == {}


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="bars_per_system"):
        synth_systems(3, seed=0, bars_per_system=0)
    assert synth_systems(0, seed=0, bars_per_system=4) == []
