"""`sonfolio read` and `sonfolio transcribe` on tiny models, real engravings and real speech."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile
from infer_tiny import (
    SPEECH_WINDOW_S,
    SYSTEMS,
    TINY_INFER,
    pages_and_models,
    params_file,
    speech_wav,
)
from PIL import Image

from sonfolio.cli import main
from sonfolio.infer.formats import read_lilypond
from sonfolio.infer.run import default_model
from sonfolio.score.common.page import Box
from sonfolio.score.decode.read import Reading, SystemText
from sonfolio.score.decode.read import problem as _problem


@pytest.fixture(scope="module")
def files(tmp_path_factory, params):
    files = pages_and_models(tmp_path_factory.mktemp("infer"), params)
    root = files["root"]
    (root / "notes.txt").write_text("not an image, not audio\n")
    return {
        **files,
        "params": params_file(root, **TINY_INFER),
        "wav": speech_wav(root / "short.wav"),
        "long": speech_wav(root / "long.wav", seconds=2.5 * SPEECH_WINDOW_S),
    }


def cli(files, *argv):
    return main([*argv, "--params", str(files["params"]), "--threads", "1", "--device", "cpu"])


def read_json(files, capsys, *argv):
    assert cli(files, "read", *argv, "--model", str(files["score"]), "--format", "json") == 0
    return json.loads(capsys.readouterr().out)


def test_read_a_system_gives_one_text_for_the_whole_image(files, capsys):
    out = read_json(files, capsys, str(files["root"] / "system.png"))
    (image,) = out["images"]
    (system,) = image["systems"]
    with Image.open(files["root"] / "system.png") as img:
        assert system["box"] == [0, 0, img.width, img.height]
    assert isinstance(system["text"], str) and out["model"] == "score"
    assert system["canonical"] == (system["problem"] is None)


def test_read_a_page_finds_its_three_systems(files, capsys):
    page = str(files["root"] / "page.png")
    out = read_json(files, capsys, page)
    boxes = [s["box"] for s in out["images"][0]["systems"]]
    assert len(boxes) == 3
    assert [b[1] for b in boxes] == sorted(b[1] for b in boxes)  # top to bottom
    assert len(read_json(files, capsys, page, "--no-page")["images"][0]["systems"]) == 1


def test_read_text_prints_one_line_per_system(files, capsys):
    page = str(files["root"] / "page.png")
    assert cli(files, "read", page, "--model", str(files["score"])) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_read_writes_a_lilypond_file_that_compiles(files, capsys, lilypond, tmp_path):
    out = tmp_path / "page.ly"
    page = str(files["root"] / "page.png")
    model = str(files["score"])
    code = cli(files, "read", page, "--model", model, "--format", "ly", "-o", str(out))
    text = out.read_text()
    listed = [line for line in text.splitlines() if line.startswith("% ") and " system " in line]
    assert len(listed) == 3  # each system: its \score, or why it was left out
    # the tiny model may read no valid system: then the file says so and the exit code is 1
    engraved = any(line.startswith("\\score") for line in text.splitlines())
    assert code == (0 if engraved else 1)
    assert engraved or "% NOTHING ENGRAVED" in text
    assert '\\include "lilypond-book-preamble.ly"' in text
    done = subprocess.run(
        [str(lilypond), "-dno-print-pages", "-o", str(tmp_path / "x"), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_read_writes_musicxml_with_the_notes_of_the_valid_systems(files, capsys, tmp_path):
    from music21 import converter
    from score.test_musicxml import canonical_notes, read_back_notes

    page = str(files["root"] / "page.png")
    systems = read_json(files, capsys, page)["images"][0]["systems"]
    out = tmp_path / "page.musicxml"
    model = str(files["score"])
    code = cli(files, "read", page, "--model", model, "--format", "musicxml", "-o", str(out))
    valid = [s["text"] for s in systems if s["canonical"]]
    assert code == (0 if valid else 1)
    score = converter.parse(out)
    assert read_back_notes(score) == canonical_notes(valid)
    marks = [e.content for e in score.recurse() if hasattr(e, "content")]
    assert len([m for m in marks if "not read" in m]) == len(systems) - len(valid)


def test_lilypond_output_keeps_canonical_systems_and_comments_out_the_rest(lilypond, tmp_path):
    hostile = '#(system "touch pwned") c\'4'
    systems = [
        SystemText(1, Box(0, 0, 10, 10), SYSTEMS[0], None),
        SystemText(2, Box(0, 10, 10, 20), hostile, _problem(hostile)),
        SystemText(3, Box(0, 20, 10, 30), SYSTEMS[1], None),
    ]
    assert systems[1].problem is not None
    text = read_lilypond([("page.png", Reading(systems, 0.0))])
    code = [line for line in text.splitlines() if not line.startswith("%")]
    assert sum(line.startswith("\\score") for line in code) == 2
    assert "#(" not in "\n".join(code)
    path = tmp_path / "out.ly"
    path.write_text(text)
    done = subprocess.run(
        [str(lilypond), "-dno-print-pages", "-o", str(tmp_path / "x"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "pwned").exists()


def test_a_page_ly_engraves_a_continuation_system_in_the_time_above_it(tmp_path, lilypond):
    """The second line of a page prints no time signature: the .ly reads it in the 3/4 the
    first leaves in force (no bar-check warning, and no 4/4 drawn)."""
    first = r"\clef treble \key g \major \time 3/4 g'2. | a'4 b'4 c''4"
    second = r"\clef treble \key g \major d''2. | b'2."
    systems = [
        SystemText(1, Box(0, 0, 10, 10), first, None),
        SystemText(2, Box(0, 10, 10, 20), second, _problem(second, "3/4"), "3/4"),
    ]
    assert systems[1].problem is None and _problem(second, "2/4") is not None
    path = tmp_path / "page.ly"
    path.write_text(read_lilypond([("page.png", Reading(systems, 0.0))]))
    assert r"\once \omit Staff.TimeSignature \time 3/4 " + second in path.read_text()
    done = subprocess.run(
        [str(lilypond), "-dno-print-pages", "-o", str(tmp_path / "x"), str(path)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr, done.stderr


def test_transcribe_cuts_two_and_a_half_windows_into_three_chunks(files, capsys):
    argv = ["transcribe", str(files["long"]), "--model", str(files["speech"]), "--format", "json"]
    assert cli(files, *argv) == 0
    (result,) = json.loads(capsys.readouterr().out)["files"]
    chunks = result["chunks"]
    assert len(chunks) == 3
    assert result["duration"] == pytest.approx(2.5 * SPEECH_WINDOW_S, abs=0.01)
    assert chunks[0]["start"] == 0 and chunks[-1]["end"] == result["duration"]
    assert all(c["end"] - c["start"] <= SPEECH_WINDOW_S for c in chunks)


def test_transcribe_reads_flac_and_ogg_as_well_as_wav(files, capsys, tmp_path):
    pcm, rate = soundfile.read(files["wav"], dtype="int16")
    paths = [files["wav"]]
    for ext in ("flac", "ogg"):
        paths.append(tmp_path / f"clip.{ext}")
        soundfile.write(paths[-1], pcm, rate)
    assert cli(files, "transcribe", *map(str, paths), "--model", str(files["speech"])) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("==> ")] == [
        f"==> {p} <==" for p in paths
    ]


def test_the_commands_read_only_their_sections_of_params(files, capsys, tmp_path):
    import yaml

    raw = yaml.safe_load(files["params"].read_text())
    del raw["score_data"]["triplets"]  # a training section from another version of the project
    raw["speech_train"]["lr"] = "fast"
    older = tmp_path / "older.yaml"
    older.write_text(yaml.safe_dump(raw))
    wav, speech = str(files["wav"]), str(files["speech"])
    argv = ["--params", str(older), "--threads", "1", "--device", "cpu"]
    assert main(["transcribe", wav, "--model", speech, *argv]) == 0
    image, score = str(files["root"] / "system.png"), str(files["score"])
    assert main(["read", image, "--model", score, *argv]) == 0
    capsys.readouterr()
    # what they read is still checked, by name, before any model loads
    raw["infer"]["speech"]["max_tokens"] = 0
    older.write_text(yaml.safe_dump(raw))
    assert main(["transcribe", wav, "--model", speech, *argv]) == 2
    err = capsys.readouterr().err
    assert "infer.speech.max_tokens" in err
    assert "score_data" not in err and "speech_train" not in err
    # and check-params, as every stage, still reads the whole file
    assert main(["check-params", str(older)]) == 1
    err = capsys.readouterr().err
    assert "score_data.triplets" in err and "speech_train.lr" in err


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("read", "missing.png: no such file"),
        ("read", "notes.txt is not an image"),
        ("transcribe", "missing.wav: no such file"),
        ("transcribe", "notes.txt is not audio"),
        ("transcribe", "system.png is not audio"),
    ],
)
def test_a_bad_input_file_is_named_with_exit_code_2(files, capsys, command, message):
    name = message.split()[0].removesuffix(":")  # the file the message begins with
    model = files["score" if command == "read" else "speech"]
    assert cli(files, command, str(files["root"] / name), "--model", str(model)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_missing_or_wrong_model_folder_is_named_with_exit_code_2(files, capsys):
    image = str(files["root"] / "system.png")
    missing = files["root"] / "no_model"
    assert cli(files, "read", image, "--model", str(missing)) == 2
    assert f"{missing} is not a folder" in capsys.readouterr().err
    assert cli(files, "read", image, "--model", str(files["speech"])) == 2
    assert "holds a speech model; this needs a score model" in capsys.readouterr().err


def test_a_bad_params_file_is_named_with_exit_code_2(files, capsys, tmp_path):
    image = str(files["root"] / "system.png")
    assert main(["read", image, "--params", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml not found" in capsys.readouterr().err


def test_an_empty_image_has_no_systems_and_says_so(files, capsys):
    blank = files["root"] / "blank.png"
    Image.fromarray(np.full((60, 200), 255, np.uint8)).save(blank)
    out = read_json(files, capsys, str(blank), "--page")
    assert out["images"][0]["systems"] == []


def test_the_default_model_is_the_exported_variant_else_fp32(params, tmp_path):
    paths = params.paths.with_track("score", export=tmp_path / "onnx", model=tmp_path / "fp32")
    folder, why = default_model("score", paths, "int8_ptq")
    assert folder == tmp_path / "fp32" and "onnx/int8_ptq is absent" in why
    (tmp_path / "onnx" / "int8_ptq").mkdir(parents=True)
    folder, why = default_model("score", paths, "int8_ptq")
    assert folder == tmp_path / "onnx" / "int8_ptq" and "infer.variant" in why


def test_audio_cuts_that_do_not_fit_the_model_window_fail_at_load(files, capsys, tmp_path):
    params = params_file(
        tmp_path,
        speech={
            "audio": {
                "search_s": 1.5,
                "silence_db": -35.0,
                "overlap_s": 0.6,
                "max_repeats": 3,
                "pause_s": 0.5,
            }
        },
    )
    argv = ["transcribe", str(files["wav"]), "--model", str(files["speech"])]
    assert main([*argv, "--params", str(params)]) == 2
    assert "infer.speech.audio.search_s + overlap_s" in capsys.readouterr().err


@pytest.fixture(scope="module")
def int8_exports(files, params):
    """Both tiny models exported and quantized by the export stages' own functions, with the
    fused decoder the stage writes beside each (the one the ORT loop opens)."""
    from sonfolio.export.decoder_step import write_fused
    from sonfolio.export.fp32 import export_fp32
    from sonfolio.export.int8 import quantize_int8

    exported = {}
    for track, task in (
        ("score", "image-to-text-with-past"),
        ("speech", "automatic-speech-recognition-with-past"),
    ):
        fp32, int8 = files["root"] / f"{track}_onnx_fp32", files["root"] / f"{track}_int8"
        export_fp32(files[track], fp32, task, params.export)
        quantize_int8(fp32, int8, params.export)
        write_fused(int8)
        exported[track] = int8
    return exported


@pytest.mark.slow
def test_read_and_transcribe_with_int8_onnx_exports(files, capsys, int8_exports):
    """The default route: the exported int8 variants."""
    exported = int8_exports
    argv = [str(files["root"] / "page.png"), "--model", str(exported["score"]), "--format", "json"]
    assert cli(files, "read", *argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "score_int8" and len(out["images"][0]["systems"]) == 3
    argv = [str(files["long"]), "--model", str(exported["speech"]), "--format", "json"]
    assert cli(files, "transcribe", *argv) == 0
    assert len(json.loads(capsys.readouterr().out)["files"][0]["chunks"]) == 3


@pytest.mark.slow
def test_the_inference_path_imports_neither_torch_nor_transformers(files, int8_exports):
    # `read`, `transcribe` and the service on ONNX variants: their memory and start-up are
    # the runtime's, not torch's and transformers' (~300 MB, seconds of imports), nor onnx's
    common = ["--params", str(files["params"]), "--threads", "1", "--device", "cpu"]
    read = ["read", str(files["root"] / "page.png"), "--model", str(int8_exports["score"])]
    hear = ["transcribe", str(files["long"]), "--model", str(int8_exports["speech"])]
    code = f"""
import sys
from fastapi.testclient import TestClient
from sonfolio.cli import main
from sonfolio.config.params import load_params
from sonfolio.serve import create_app
assert main({[*read, *common]!r}) == 0
assert main({[*hear, *common]!r}) == 0
# nor onnx (~70 ms of a cold start): the export wrote the decoder the loop opens
print("ONNX", "onnx" in sys.modules)
p = load_params({str(files["params"])!r})
app = create_app(p.infer, p.serve, {str(int8_exports["score"])!r}, {str(int8_exports["speech"])!r},
                 threads=1, device="cpu")
with TestClient(app) as client:
    with open({str(files["wav"])!r}, "rb") as f:
        answer = client.post("/transcribe", files={{"file": ("a.wav", f, "audio/wav")}})
    assert answer.status_code == 200, answer.text
print("HEAVY", sorted({{m.split(".")[0] for m in sys.modules}} & {{"torch", "transformers"}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1] == "HEAVY []"
    assert "ONNX False" in out.stdout.splitlines()


def test_a_page_with_no_staff_says_so_and_its_ly_engraves_nothing(files, caplog, tmp_path):
    blank = tmp_path / "blank.png"
    Image.new("L", (800, 1100), 255).save(blank)
    out = tmp_path / "blank.ly"
    model = str(files["score"])
    code = cli(
        files, "read", str(blank), "--page", "--model", model, "--format", "ly", "-o", str(out)
    )
    assert code == 1  # not a file that LilyPond "compiles" into an empty page, with exit 0
    assert "no staff system found" in caplog.text
    assert out.read_text().splitlines()[1].startswith("% NOTHING ENGRAVED")
