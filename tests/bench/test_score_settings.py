"""benchmarks.score_settings: what it counts in the held-out readings, and the overrides it
accepts (the stages it runs are the pipeline's own, tested with them)."""

from __future__ import annotations

import pytest
import yaml

from benchmarks.score_settings import REPO, SETTINGS, _override, rhythms
from sonfolio.config.params import Params


def test_dots_and_triplets_are_counted_in_truth_and_reading():
    rows = [
        {  # a dotted eighth read plain, a dotted quarter and a dotted half kept
            "ref": "\\clef treble \\key g \\major g'8. a'16 b'4. c''8 | d''2. r4",
            "hyp": "\\clef treble \\key g \\major g'8 a'8 b'4. c''8 | d''2. r4",
            "ser": 0.1,
        },
        {  # a triplet read as eighths and a sixteenth; a double-dotted rest kept
            "ref": "\\clef treble \\key d \\major \\tuplet 3/2 { d'8 e'8 fis'8 } g'4 r8.. a'32",
            "hyp": "\\clef treble \\key d \\major d'16 e'16 fis'8 g'4 r8.. a'32",
            "ser": 0.3,
        },
        {
            "ref": "\\clef bass \\key c \\major c4 d4",
            "hyp": "\\clef bass \\key c \\major c4 d4",
            "ser": 0.0,
        },  # fmt: skip
    ]
    got = rhythms(rows)
    assert (got["dotted_truth"], got["dotted_written"]) == (4, 3)
    assert (got["dotted_eighths_truth"], got["dotted_eighths_written"]) == (1, 0)
    assert (got["triplet_systems"], got["triplets_truth"], got["triplets_written"]) == (1, 1, 0)
    assert got["ser_triplet_systems"] == 0.3 and got["ser_other_systems"] == 0.05


def test_only_score_keys_of_params_yaml_are_overridden():
    params = {"score_data": {"dotted": 0.0, "scan": {"dpi": 150}}, "speech_train": {"lr": 1}}
    assert _override(params, {"score_data.scan.dpi": 200})["score_data"]["scan"]["dpi"] == 200
    with pytest.raises(SystemExit, match="not a key"):
        _override(params, {"score_data.dotted_pairs": 0.3})
    with pytest.raises(SystemExit, match="only score_data and score_train"):
        _override(params, {"speech_train.lr": 2})
    # every setting names keys of this checkout's params.yaml, and the result still validates
    for overrides in SETTINGS.values():
        raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
        Params.model_validate(_override(raw, overrides))
