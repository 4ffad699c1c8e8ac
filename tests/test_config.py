"""params.yaml is validated before any work, and errors name the key, value and fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sonfolio.config.base import ParamsError
from sonfolio.config.eval import EvalParams
from sonfolio.config.params import Params, load_params, parse_params
from sonfolio.config.report import ReportParams
from sonfolio.config.sections import SECTIONS, parse_sections
from sonfolio.config.stage import load_sections
from sonfolio.config.train import TrainParams

ROOT = Path(__file__).resolve().parents[1]


def raw_params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_the_shipped_params_are_valid():
    params = load_params(ROOT / "params.yaml")
    assert params.score_data.bars_per_system > 0


def test_unknown_key_is_rejected_by_name():
    raw = raw_params()
    raw["score_data"]["bars_per_sytem"] = 4
    with pytest.raises(ParamsError, match=r"score_data\.bars_per_sytem: unknown key"):
        parse_params(raw)


def test_bad_value_names_key_value_and_what_is_allowed():
    raw = raw_params()
    raw["score_data"]["bars_per_system"] = 40
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert "score_data.bars_per_system = 40" in str(err.value)
    assert "less than or equal to 16" in str(err.value)


def test_heldout_collection_must_be_a_source():
    raw = raw_params()
    raw["score_data"]["split"]["heldout_collections"] = ["ryans"]
    with pytest.raises(ParamsError, match="ryans.*no source defines"):
        parse_params(raw)


def test_archive_source_needs_a_checksum():
    raw = raw_params()
    raw["score_data"]["sources"].append({"name": "mine", "archive": "https://x.org/a.zip"})
    with pytest.raises(ParamsError, match="needs its sha256"):
        parse_params(raw)


def test_ctc_decoding_without_a_ctc_loss_is_refused():
    raw = raw_params()
    raw["score_train"]["decode"], raw["score_train"]["ctc_weight"] = "ctc", 0.0
    with pytest.raises(ParamsError, match="score_train.ctc_weight above 0.*or decode: attention"):
        parse_params(raw)
    raw["score_train"]["decode"] = "attention"
    assert parse_params(raw).score_train.decode == "attention"


def test_ctc_alone_is_refused_where_the_decoder_reads():
    """ctc_weight: 1 never trains the decoder: only a model read by its CTC head takes it."""
    raw = raw_params()
    raw["score_train"]["decode"], raw["score_train"]["ctc_weight"] = "attention", 1.0
    with pytest.raises(ParamsError, match="ctc_weight below 1.*or decode: ctc"):
        parse_params(raw)
    raw["score_train"]["decode"] = "ctc"
    assert parse_params(raw).score_train.ctc_weight == 1.0
    raw = raw_params()
    raw["speech_train"]["ctc_weight"] = 1.0
    with pytest.raises(ParamsError, match="speech model reads with its decoder"):
        parse_params(raw)


def test_source_sets_exactly_one_kind():
    raw = raw_params()
    raw["score_data"]["sources"][0]["folder"] = "/tmp"
    with pytest.raises(ParamsError, match="exactly one of music21, folder, archive"):
        parse_params(raw)


def test_check_params_command_validates_without_running(tmp_path):
    raw = raw_params()
    raw["score_tokenizer"]["vocab_size"] = "big"
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "sonfolio.cli", "check-params"]
    res = subprocess.run([*cmd, str(bad)], capture_output=True, text=True)
    assert res.returncode == 1
    assert "score_tokenizer.vocab_size = 'big'" in res.stderr
    good = subprocess.run([*cmd, str(ROOT / "params.yaml")], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert not (tmp_path / "data").exists()


def test_clips_longer_than_the_model_window_fail_before_any_work():
    raw = raw_params()
    raw["speech_data"]["max_duration_s"] = 12
    raw["speech_tokenizer"]["chunk_length_s"] = 8
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert "speech_data.max_duration_s = 12" in str(err.value)
    assert "chunk_length_s = 8" in str(err.value)
    assert "{" not in str(err.value), "the message must not dump the whole params mapping"


def test_a_moved_paths_key_names_where_it_went():
    """An older params.yaml with the flat per-track paths says where each key lives now."""
    raw = raw_params()
    raw["paths"]["score_model"] = "models/score_fp32"
    with pytest.raises(ParamsError, match=r"paths\.score_model is now paths\.tracks\.score\.model"):
        parse_params(raw)


def test_a_moved_infer_key_names_where_it_went():
    """An older params.yaml with `infer`'s flat keys says where each lives now, by name."""
    raw = raw_params()
    raw["infer"]["page"] = raw["infer"]["score"].pop("page")
    raw["infer"]["speech_max_tokens"] = 120
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert "infer.page is now infer.score.page" in str(err.value)
    assert "infer.speech_max_tokens is now infer.speech.max_tokens" in str(err.value)


def test_a_track_without_its_params_sections_is_refused():
    raw = raw_params()
    raw["paths"]["tracks"]["piano"] = dict(raw["paths"]["tracks"]["score"])
    with pytest.raises(ParamsError, match=r"paths\.tracks\.piano has no params sections"):
        parse_params(raw)


def test_a_step_runs_for_a_known_track_only():
    from sonfolio import tracks

    assert tracks.face("score", "eval").name == "score"
    assert tracks.from_argv(["speech"], "train") == "speech"
    with pytest.raises(tracks.UnknownTrack, match="no sonfolio/piano/steps/eval.py"):
        tracks.face("piano", "eval")
    with pytest.raises(tracks.UnknownTrack, match="no sonfolio/score/steps/mix.py"):
        tracks.face("score", "mix")
    with pytest.raises(tracks.UnknownTrack, match="no sonfolio/piano/steps/"):
        tracks.from_argv(["piano"], "train")
    with pytest.raises(tracks.UnknownTrack, match="lowercase"):
        tracks.face("../etc", "eval")  # never imported: a name is checked before the import
    with pytest.raises(tracks.UnknownTrack, match=r"usage: python -m tasks\.train <track>"):
        tracks.from_argv([], "train")


def test_sections_name_every_params_section():
    """A stage knows the section names without importing every schema (SECTIONS)."""
    assert tuple(Params.model_fields) == SECTIONS
    assert set(raw_params()) == set(SECTIONS)


def test_a_stage_validates_the_sections_it_reads_and_refuses_unknown_ones():
    """A stage's view (parse_sections) reads only its own sections (its output cannot depend
    on the others); its own sections fail as the whole file does, and a misspelt section name
    stops it."""
    raw = raw_params()
    raw["serve"]["port"] = 0
    assert parse_sections(EvalParams, raw).score_eval.seed == raw["score_eval"]["seed"]
    with pytest.raises(ParamsError, match=r"serve\.port = 0"):
        parse_params(raw)
    raw = raw_params()
    raw["score_eval"]["batch_size"] = 0
    with pytest.raises(ParamsError) as whole:
        parse_params(raw)
    with pytest.raises(ParamsError) as view:
        parse_sections(EvalParams, raw)
    assert str(view.value) == str(whole.value)
    raw = raw_params()
    raw["scor_eval"] = {"seed": 1}
    with pytest.raises(ParamsError, match=r"scor_eval: unknown key"):
        parse_sections(EvalParams, raw)


def test_every_stage_fails_at_once_on_a_bad_value_in_any_section(tmp_path):
    """The first stage of a `dvc repro` (data) stops on a bad eval setting in seconds, before
    any training: load_sections validates the whole file after the stage's own sections."""
    raw = raw_params()
    raw["score_eval"]["batch_size"] = 0
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError, match=r"score_eval\.batch_size = 0"):
        load_sections(ReportParams, tmp_path / "params.yaml")


def test_a_stage_refuses_a_track_without_its_params_sections():
    raw = raw_params()
    raw["paths"]["tracks"]["piano"] = dict(raw["paths"]["tracks"]["score"])
    with pytest.raises(ParamsError, match=r"paths\.tracks\.piano has no params sections"):
        parse_sections(ReportParams, raw)


def test_a_training_stage_checks_its_preset():
    raw = raw_params()
    raw["score_train"]["preset"] = "warp"
    with pytest.raises(ParamsError, match=r"score_train\.preset = 'warp' is not a train_presets"):
        parse_sections(TrainParams, raw)


@pytest.mark.parametrize(
    ("model", "data", "says"),
    [
        (  # issue 35: passed the check, failed when training built the model
            {"encoder": "vit", "patch": [97, 8]},
            {},
            "score_train.model.patch = [97, 8]: its height 97 does not divide "
            "score_train.model.image_height = 96 (the ViT cuts the image into whole patches): "
            "set the patch's height to one of [96, 48, 32, 24]",
        ),
        (
            {"encoder": "vit", "patch": [96, 7]},
            {},
            "its width 7 does not divide score_data.image_long_side = 640",
        ),
        (
            {"encoder": "conv", "image_height": 100},
            {},
            "score_train.model.image_height = 100 is not a multiple of 32: set it to 96 or 128",
        ),
        (
            {"encoder": "conv"},
            {"image_long_side": 642},
            "score_data.image_long_side = 642 is not a multiple of 4: set it to 640 or 644, or "
            "lower width_pools",
        ),
    ],
)
def test_an_image_the_score_model_cannot_cut_fails_the_params_check(model, data, says):
    """What building the model would refuse (sonfolio/score/model/model.py) fails with the
    params, in the whole file's check and in the train stage's own, naming both keys."""
    raw = raw_params()
    raw["score_train"]["model"].update(model)
    raw["score_data"].update(data)
    for check in (parse_params, lambda r: parse_sections(TrainParams, r)):
        with pytest.raises(ParamsError) as err:
            check(raw)
        assert says in str(err.value)
    raw["score_train"]["model"]["pretrained"] = "some/model"  # brings its own image size
    assert parse_params(raw).score_train.model.pretrained == "some/model"


def test_the_check_refuses_what_the_model_builder_refuses_and_nothing_else(params):
    """The params check and the model builder agree, image by image (no false alarm)."""
    from sonfolio.config.train import check_score_input
    from sonfolio.score.model.model import SIZES, _encoder_config

    shipped = params.score_train.model
    for encoder, patch, height, width, channels, pools in [
        ("vit", (96, 8), 96, 640, 5, 2),  # the shipped model
        ("vit", (97, 8), 96, 640, 5, 2),
        ("vit", (48, 10), 96, 640, 5, 2),
        ("vit", (96, 7), 96, 640, 5, 2),
        ("conv", (97, 7), 96, 640, 5, 2),  # a conv encoder has no patches
        ("conv", (96, 8), 100, 640, 5, 2),
        ("conv", (96, 8), 64, 640, 6, 7),
        ("conv", (96, 8), 64, 642, 6, 2),
    ]:
        conv = shipped.conv.model_copy(update={"channels": [8] * channels, "width_pools": pools})
        model = shipped.model_copy(
            update={"encoder": encoder, "patch": patch, "image_height": height, "conv": conv}
        )
        try:
            _encoder_config(model, SIZES[model.size], width, 0.0, 0.0)
        except ValueError:
            builds = False
        else:
            builds = True
        try:
            check_score_input(model, width)
        except ValueError:
            passes = False
        else:
            passes = True
        assert passes == builds, (encoder, patch, height, width, channels, pools)


@pytest.mark.parametrize("where", ["train_engine", "preset"])
def test_a_micro_batch_that_cannot_divide_the_batch_fails_the_params_check(where):
    raw = raw_params()
    if where == "preset":
        raw["train_presets"]["default"] = {"micro_batch": 64}
    else:
        raw["train_engine"]["micro_batch"] = 5
    with pytest.raises(ParamsError) as err:
        parse_sections(TrainParams, raw)
    micro = 64 if where == "preset" else 5
    assert (
        f"train_engine.micro_batch = {micro} (with score_train.preset default) does not divide "
        "score_train.effective_batch = 32: pick a divisor of it, or full, or auto"
    ) in str(err.value)
    raw["score_train"]["effective_batch"] = raw["speech_train"]["effective_batch"] = 320
    for section in ("score_qat", "speech_qat"):
        raw[section]["effective_batch"] = 320
    assert parse_params(raw).score_train.effective_batch == 320


def test_the_from_scratch_preset_is_valid_params_and_prints_dvc_overrides(capsys):
    """`dvc exp run $(sonfolio preset speech-from-scratch)`: every key it sets exists and the
    result validates; the overrides are YAML (null, lists) as `-S` reads them."""
    from sonfolio.cli import main
    from sonfolio.config.presets import PresetError, apply

    params = parse_params(apply(raw_params(), "speech-from-scratch"))
    assert params.speech_tokenizer.base_model is None
    assert params.speech_train.model.base_model is None and params.speech_eval.splits == [
        "test",
        "val",
    ]
    assert main(["preset", "speech-from-scratch"]) == 0
    args = capsys.readouterr().out.split()
    assert args[:2] == ["-S", "speech_data.synthetic.utterances=4000"]
    assert "speech_tokenizer.base_model=null" in args and "speech_eval.splits=[test,val]" in args
    assert main(["preset", "nope"]) == 2
    assert "known: speech-from-scratch" in capsys.readouterr().err
    raw = raw_params()
    del raw["speech_train"]["lr"]  # an older params.yaml without a key the preset sets
    with pytest.raises(PresetError, match=r"speech_train\.lr is not a params\.yaml key"):
        apply(raw, "speech-from-scratch")
