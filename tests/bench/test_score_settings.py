"""benchmarks.score_settings: what it counts in the held-out readings, and the overrides it
accepts (the stages it runs are the pipeline's own, tested with them)."""

from __future__ import annotations

import pytest
import yaml
from project_repo import tiny_params

from benchmarks.score_settings import (
    REPO,
    SETTINGS,
    _override,
    against_root,
    figures,
    rhythms,
    run_setting,
)
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
    with pytest.raises(SystemExit, match="only score_data and score_train and score_qat"):
        _override(params, {"speech_train.lr": 2})
    # every setting names keys of this checkout's params.yaml, and the result still validates
    for overrides in SETTINGS.values():
        raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
        Params.model_validate(_override(raw, overrides))


def test_a_training_setting_reuses_the_runs_data_and_its_counts(tmp_path, monkeypatch):
    """A setting of score_train (or score_qat) keys only does not rerun the data stage: the
    run's data is linked and the data stage's metrics copied beside it, where `figures` reads
    them (a height_128 run once ended on the missing metrics/score_data.json after its eval)."""
    import benchmarks.score_settings as bench

    ran = []
    monkeypatch.setattr(bench, "run_stage", lambda work, task, track: ran.append(task))
    root = tmp_path / "run"
    (root / "data" / "score").mkdir(parents=True)
    (root / "metrics").mkdir()
    (root / "metrics" / "score_data.json").write_text('{"dotted_systems": 7}', "utf-8")
    work = run_setting(root, "height_128", SETTINGS["height_128"])
    assert "tasks.data" not in ran and ran[0] == "tasks.tokenizer"
    assert (work / "data" / "score").resolve() == (root / "data" / "score").resolve()
    assert (work / "metrics" / "score_data.json").read_text("utf-8") == '{"dotted_systems": 7}'


@pytest.mark.slow
def test_a_setting_runs_the_score_stages_and_is_read(tmp_path):
    """The stage path end to end on a tiny params.yaml: the data stage under the override (all
    train systems of real music offered dotted pairs), tokenizer, 2 training steps, 2 QAT
    steps, export, the eval with one held-out page; its figures read back."""
    raw = tiny_params(yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8")))
    raw["score_qat"].update(max_steps=2, eval_every=2, checkpoint_every=2, warmup_steps=0)
    raw["score_eval"].update(max_samples=6, decode_max_tokens=16)
    raw["score_eval"]["pages"].update(parts=1, engravings=["lilypond"])
    base = tmp_path / "tiny.yaml"
    base.write_text(yaml.safe_dump(raw), encoding="utf-8")
    work = run_setting(tmp_path, "dotted", {"score_data.dotted": 1.0}, base)
    assert (
        yaml.safe_load((work / "params.yaml").read_text(encoding="utf-8"))["score_data"]["dotted"]
        == 1.0
    )
    got = figures(work)
    assert got["dotted_systems_trained"] > 0 and got["triplet_systems_trained"] == 0
    assert got["steps"] == 2 and set(got["ser"]) == set(raw["score_eval"]["splits"])
    assert set(got["pages"]) == {"lilypond"}
    assert got["heldout_rhythms"]["dotted_truth"] >= got["heldout_rhythms"]["dotted_eighths_truth"]
    # its pages paired with a run's (here its own: no difference), none where a run has no rows
    same = against_root(work, work)["lilypond"]
    assert same["note_error_rate_difference"] == 0 and same["pages"] >= 1
    assert against_root(work, tmp_path) is None


def test_each_setting_row_keeps_the_machine_it_ran_on():
    """Rows kept from an earlier run keep their own CPU: the top level is the last run's."""
    from benchmarks import stamp_conditions

    result = {"settings": {"old": {"conditions": {"cpu": {"model": "elsewhere"}}}, "new": {}}}
    stamp_conditions(result, "new", [0.0, 0.0, 0.0])
    assert result["settings"]["old"]["conditions"]["cpu"] == {"model": "elsewhere"}
    assert result["settings"]["new"]["conditions"]["cpu"] == result["cpu"]
    assert result["cpus"] == result["settings"]["new"]["conditions"]["cpus"]
