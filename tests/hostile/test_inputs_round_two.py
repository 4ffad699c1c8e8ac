"""Hostile inputs, round two (issue 35, items 6, 7, 8, 9, 10, 11): each a clear error that names the
input and the fix, or the right answer, never a traceback, a silent cut or an output that only
looks written. Every input is made here, under tmp_path.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile
from infer_tiny import render_systems, score_model
from PIL import Image

from sonfolio.cli import main
from sonfolio.config.params import Params
from sonfolio.infer.inputs import BadInput, display_name, open_audio, open_image

ROOT = Path(__file__).resolve().parents[2]
PARAMS = str(ROOT / "params.yaml")


def float_wav(samples: np.ndarray, rate: int = 16_000) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, samples, rate, format="WAV", subtype="FLOAT")
    return buf.getvalue()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_float_wav_with_nan_or_inf_samples_is_refused_by_name(params: Params, bad: float):
    samples = np.zeros(16_000, np.float32)
    samples[8_000] = bad
    with pytest.raises(BadInput, match="clip.wav holds NaN or infinite samples") as err:
        open_audio(float_wav(samples), "clip.wav", params.infer.speech.audio_limits)
    assert err.value.kind == "corrupt"


def test_the_cli_refuses_a_nan_wav_with_exit_2_and_no_traceback(tmp_path, capsys):
    path = tmp_path / "nan.wav"
    path.write_bytes(float_wav(np.full(16_000, np.nan, np.float32)))
    assert main(["transcribe", str(path), "--params", PARAMS]) == 2
    err = capsys.readouterr().err
    assert "NaN or infinite samples" in err and "Traceback" not in err


def test_a_wav_whose_header_claims_less_than_it_holds_is_refused(params: Params):
    """A 6 s WAV whose header says 1 s: libsndfile would read 1 s and drop the rest unseen."""
    buf = io.BytesIO()
    soundfile.write(buf, np.zeros(6 * 16_000, np.int16), 16_000, format="WAV", subtype="PCM_16")
    data = bytearray(buf.getvalue())
    at = data.index(b"data")
    data[at + 4 : at + 8] = struct.pack("<I", 16_000 * 2)  # 1 s of 16-bit mono samples
    with pytest.raises(BadInput, match=r"header says 1\.0 s, but the file holds about 6\.0 s"):
        open_audio(bytes(data), "cut.wav", params.infer.speech.audio_limits)
    # a WAV as written is read whole
    assert open_audio(buf.getvalue(), "whole.wav", params.infer.speech.audio_limits).size == 96_000


def upright_system() -> Image.Image:
    (system,) = render_systems(["\\clef treble \\key c \\major \\time 4/4 c'4 d'4 e'4 f'4"])
    return system


def test_a_phone_photo_stored_turned_is_read_upright(params: Params):
    """EXIF orientation 6: the pixels are stored turned a quarter, and every viewer turns them
    back; so does the reader, instead of cutting a page whose staves run down it."""
    upright = upright_system()
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # what the camera wrote
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to display
    buf = io.BytesIO()
    stored.save(buf, format="JPEG", exif=exif.tobytes(), quality=95)
    read = open_image(buf.getvalue(), "photo.jpg", params.infer.score.image)
    assert read.size == upright.size
    diff = np.abs(np.asarray(read, np.float32) - np.asarray(upright, np.float32)).mean()
    assert diff < 8, f"mean difference {diff:.1f} of 255: not the upright picture"


@pytest.mark.parametrize("fmt", ["PPM", "TGA", "ICO", "PCX", "SGI", "IM", "DDS"])
def test_image_formats_past_the_documented_six_are_refused(params: Params, fmt: str):
    img = Image.new("RGB" if fmt != "DDS" else "RGBA", (64, 32), "white")
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    with Image.open(io.BytesIO(buf.getvalue())) as probe:  # Pillow itself reads them
        assert probe.format == fmt
    with pytest.raises(BadInput, match="is not an image: send a PNG, JPEG") as err:
        open_image(buf.getvalue(), f"page.{fmt.lower()}", params.infer.score.image)
    assert err.value.kind == "unsupported"


def test_a_name_is_made_safe_text():
    raw = os.fsdecode(b"caf\xe9\x1b]0;owned\x07.png")  # not UTF-8, with an escape sequence
    shown = display_name(raw)
    assert shown == "caf\\xe9\\x1b]0;owned\\x07.png"
    assert shown.isprintable() and shown.encode("utf-8")
    assert display_name("partita n°2.png") == "partita n°2.png"  # UTF-8 names stay as they are


def test_terminal_escapes_in_a_name_never_reach_the_terminal(tmp_path, capsys):
    name = tmp_path / "\x1b]0;owned\x07\x1b[2J.png"
    assert main(["read", str(name), "--params", PARAMS]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "\\x1b]0;owned\\x07\\x1b[2J.png: no such file" in err


@pytest.fixture(scope="module")
def score_folder(tmp_path_factory) -> Path:
    return score_model(tmp_path_factory.mktemp("round_two") / "score")


def test_a_non_utf8_image_name_is_read_and_written_to_a_complete_file(
    tmp_path, capsys, score_folder
):
    """Linux names are bytes: one that is not UTF-8 is written as \\xNN in the JSON, whole."""
    image = tmp_path / os.fsdecode(b"sonate \xe9t\xe9.png")
    upright_system().save(image)
    out = tmp_path / "out.json"
    argv = ["read", str(image), "-o", str(out), "--format", "json", "--model", str(score_folder)]
    assert main([*argv, "--params", PARAMS, "--threads", "1", "--device", "cpu"]) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["images"][0]["image"].endswith("sonate \\xe9t\\xe9.png")
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_failed_write_leaves_no_output_behind(tmp_path, capsys, score_folder):
    image = tmp_path / "system.png"
    upright_system().save(image)
    out = tmp_path / "out.json"
    out.mkdir()  # cannot be replaced by a file
    argv = ["read", str(image), "-o", str(out), "--model", str(score_folder), "--params", PARAMS]
    assert main([*argv, "--threads", "1", "--device", "cpu"]) != 0
    assert f"cannot write {out}" in capsys.readouterr().err
    assert out.is_dir() and not list(tmp_path.glob(".*.tmp"))


def test_an_unusual_sample_rate_decodes_in_bounded_memory(tmp_path):
    """A prime rate (191,999 Hz) has no common factor with 16 kHz: resampled as it is, every
    block's FFT had a prime length (60 s: 455 MB, against 160 MB at 192 kHz). It is resampled
    as the nearest multiple of 100 Hz: 0.0005 % faster, 5 samples of 960,000 short."""
    from test_audio import decode_noise_peak  # tests/hostile/ is on sys.path

    peak, out = decode_noise_peak(tmp_path, 191_999, 60)
    assert abs(int(out) - 960_000) <= 10  # 60 s at 16 kHz, within 0.001 %
    assert peak < 300, f"{peak:.0f} MB to decode 60 s at 191,999 Hz"


def ct2_header(dtype_id: int, nbytes: int) -> bytes:
    """A CTranslate2 model.bin (binary version 6) of one variable of shape [3] whose byte count
    is no whole number of its dtype's values."""

    def text(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    head = struct.pack("<I", 6) + text("WhisperSpec") + struct.pack("<II", 1, 1)
    var = text("encoder/w") + struct.pack("<BIBI", 1, 3, dtype_id, nbytes) + bytes(nbytes)
    return head + var + struct.pack("<I", 0)


@pytest.mark.parametrize(("dtype_id", "kind"), [(0, "float32"), (5, "bfloat16")])
def test_a_crafted_ct2_header_is_refused_naming_the_file(tmp_path, dtype_id, kind):
    from sonfolio.speech.model.ct2_import import Ct2FolderError, read_model_bin

    path = tmp_path / "model.bin"
    path.write_bytes(ct2_header(dtype_id, 3))
    with pytest.raises(Ct2FolderError, match=rf"model\.bin: encoder/w holds 3 bytes.*{kind}"):
        read_model_bin(path)


def test_a_damaged_safetensors_header_names_the_file_and_the_fix(tmp_path, capsys, score_folder):
    folder = tmp_path / "model"
    shutil.copytree(score_folder, folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:20] = b"{not a json!"  # the header's JSON, after its 8-byte length
    weights.write_bytes(bytes(data))
    image = tmp_path / "system.png"
    upright_system().save(image)
    argv = ["read", str(image), "--model", str(folder), "--params", PARAMS, "--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{weights}: not a readable safetensors file" in err
    assert "copy the model folder again" in err and "Traceback" not in err
