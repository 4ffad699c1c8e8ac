"""Hostile and careless audio: limits read from the header before decoding, memory bounded
whatever the source rate, and silence or noise answered with an empty, flagged text.

Every input is made here, in tmp_path or in memory: FLAC headers are patched to lie, noise of
three colours is drawn, and real speech is spoken by espeak-ng.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile
from transformers import WhisperFeatureExtractor

from sonfolio.cli import main
from sonfolio.config.params import Params
from sonfolio.infer.formats import transcript_result
from sonfolio.infer.inputs import BadInput, open_audio
from sonfolio.infer.run import transcribe
from sonfolio.speech.common.audio import SAMPLE_RATE, add_noise, decode, from_pcm16, resample
from sonfolio.speech.data.espeak import synthesize
from sonfolio.speech.decode.voice import has_speech

ROOT = Path(__file__).resolve().parents[2]
INVENTED = "Merci d'avoir regardé cette vidéo."  # what Whisper says to silence


def audio_bytes(seconds: float, rate: int, channels: int = 1, fmt: str = "WAV") -> bytes:
    """Silence as a file of `fmt` (16-bit PCM)."""
    buf = io.BytesIO()
    frames = np.zeros((round(seconds * rate), channels), np.int16)
    soundfile.write(buf, frames, rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def flac_claiming(total_samples: int, seconds: float = 1.0, rate: int = 192_000) -> bytes:
    """A real FLAC whose STREAMINFO says it holds `total_samples` (0: "unknown")."""
    data = bytearray(audio_bytes(seconds, rate, fmt="FLAC"))
    assert data[:4] == b"fLaC"
    # STREAMINFO starts at byte 8; its bytes 10-17 end with the 36-bit total sample count.
    field = int.from_bytes(data[18:26], "big")
    field = (field & ~((1 << 36) - 1)) | total_samples
    data[18:26] = field.to_bytes(8, "big")
    return bytes(data)


def speech(text: str, voice: str) -> tuple[np.ndarray, int]:
    """espeak-ng French at its own rate (22,050 Hz), float32."""
    pcm, rate = synthesize(text, voice, 175, 50)
    return from_pcm16(pcm), rate


def peak_rss_mb(code: str) -> tuple[float, str]:
    """Run `code` in a fresh interpreter; (its peak resident memory in MB, its stdout).

    VmHWM, not getrusage's ru_maxrss: the latter survives exec, so a child forked from this
    (large) pytest process would report pytest's size."""
    probe = code + (
        "\nprint(next(int(line.split()[1]) for line in open('/proc/self/status')"
        " if line.startswith('VmHWM:')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    return int(out[-1]) / 1024, "\n".join(out[:-1])


def decode_noise_peak(folder: Path, rate: int, seconds: int) -> tuple[float, str]:
    """open_audio in a fresh interpreter on `seconds` (a multiple of 10) of 16-bit mono noise at
    `rate` Hz, written to `folder` 10 s at a time: (its peak memory in MB, the samples read)."""
    path = folder / "noise.wav"
    rng = np.random.default_rng(0)
    with soundfile.SoundFile(path, "w", rate, 1, format="WAV", subtype="PCM_16") as f:
        for _ in range(seconds // 10):
            f.write((3000 * rng.standard_normal(10 * rate)).astype(np.int16))
    return peak_rss_mb(
        "from pathlib import Path\n"
        "from sonfolio.config.params import load_params\n"
        "from sonfolio.infer.inputs import open_audio\n"
        "limits = load_params(Path('params.yaml')).infer.speech.audio_limits\n"
        f"print(open_audio(Path({str(path)!r}), {path.name!r}, limits).size)"
    )


def test_a_header_claiming_an_hour_at_192khz_is_refused_before_decoding(params: Params):
    # 1 s of audio whose header says 3,600 s: the old decoder allocated for the header's
    # length (an hour at 192 kHz: 2.7 GB as float32, then an FFT in float64) and was killed.
    lying = flac_claiming(3600 * 192_000)
    with pytest.raises(BadInput) as err:
        open_audio(lying, "silence.flac", params.infer.speech.audio_limits)
    assert err.value.kind == "too_large"
    assert "silence.flac is 3,600 s long" in str(err.value)
    assert "infer.speech.audio_limits.max_audio_s is 600: raise it in params.yaml" in str(err.value)


def test_the_refusal_costs_no_memory(tmp_path: Path):
    path = tmp_path / "hour.flac"
    path.write_bytes(flac_claiming(3600 * 192_000))
    peak, out = peak_rss_mb(
        "from pathlib import Path\n"
        "from sonfolio.config.params import load_params\n"
        "from sonfolio.infer.inputs import BadInput, open_audio\n"
        "limits = load_params(Path('params.yaml')).infer.speech.audio_limits\n"
        f"try: open_audio(Path({str(path)!r}), 'hour.flac', limits)\n"
        "except BadInput as err: print(err.kind)"
    )
    assert out == "too_large"
    assert peak < 150, f"{peak:.0f} MB to refuse a header"


@pytest.mark.parametrize(
    ("rate", "channels", "param", "seen"),
    [
        (4_000, 1, "min_sample_rate", "4,000 Hz"),
        (384_000, 1, "max_sample_rate", "384,000 Hz"),
        (16_000, 12, "max_channels", "12 channels"),
    ],
)
def test_rates_and_channels_outside_the_limits_are_refused_by_name(
    params: Params, rate: int, channels: int, param: str, seen: str
):
    data = audio_bytes(0.1, rate, channels)
    with pytest.raises(BadInput) as err:
        open_audio(data, "odd.wav", params.infer.speech.audio_limits)
    assert err.value.kind == "limit"
    assert seen in str(err.value) and f"infer.speech.audio_limits.{param}" in str(err.value)


def test_a_flac_with_no_length_in_its_header_is_refused_clearly(params: Params):
    with pytest.raises(BadInput) as err:
        open_audio(flac_claiming(0), "stream.flac", params.infer.speech.audio_limits)
    assert err.value.kind == "unsupported" and "gives no length" in str(err.value)


def test_audio_at_the_limit_is_read_and_past_it_refused(params: Params, tmp_path: Path):
    limits = params.infer.speech.audio_limits.model_copy(update={"max_audio_s": 2.0})
    at = tmp_path / "at.flac"
    at.write_bytes(audio_bytes(2.0, 44_100, 2, "FLAC"))
    assert open_audio(at, "at.flac", limits).shape == (2 * SAMPLE_RATE,)
    with pytest.raises(
        BadInput, match=r"is 2\.5 s long; infer\.speech\.audio_limits\.max_audio_s is 2"
    ):
        open_audio(audio_bytes(2.5, 44_100, 2, "FLAC"), "past.flac", limits)


def test_block_resampling_gives_what_the_training_resampler_gives(params: Params):
    x, rate = speech("Le train de sept heures arrive en gare. Il fait beau à Paris.", "f2")
    x = np.tile(x, 6)  # ~25 s: spans several 10 s blocks
    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format="WAV", subtype="FLOAT")
    ours = open_audio(buf.getvalue(), "speech.wav", params.infer.speech.audio_limits)
    whole = decode(buf.getvalue())  # the data stage's one-FFT resampler
    assert ours.shape == whole.shape
    edge = SAMPLE_RATE  # the one-FFT version wraps the clip's ends into each other
    assert np.abs(ours - whole)[edge:-edge].max() < 2e-3 * np.abs(whole).max()


def test_the_largest_admitted_rate_decodes_in_bounded_memory(tmp_path: Path):
    # 120 s of noise at 192 kHz (23 M samples): the one-FFT decoder takes ~1 GB on it (4.4 GB
    # at 600 s); blocks keep the peak to a few blocks and the 16 kHz output.
    peak, out = decode_noise_peak(tmp_path, 192_000, 120)
    assert out == str(120 * SAMPLE_RATE)
    assert peak < 300, f"{peak:.0f} MB to decode 120 s at 192 kHz"


def test_the_cli_refuses_too_long_audio_by_name_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "hour.flac"
    path.write_bytes(flac_claiming(3600 * 192_000))
    code = main(["transcribe", str(path), "--params", str(ROOT / "params.yaml")])
    assert code == 2
    assert "infer.speech.audio_limits.max_audio_s is 600" in capsys.readouterr().err


def colored_noise(alpha: float, level: float, seed: int, seconds: float = 6.0) -> np.ndarray:
    """Noise with power ~ 1/f**alpha (0 white, 1 pink, 2 brown), peaking at `level`."""
    n = int(seconds * SAMPLE_RATE)
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    f = np.fft.rfftfreq(n)
    f[0] = f[1]
    y = np.fft.irfft(spectrum / f ** (alpha / 2), n)
    return (level * y / np.abs(y).max()).astype(np.float32)


SENTENCES = ["Il fait beau à Paris ce matin.", "Bonjour, je voudrais un café."]
VOICES = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5"]


def test_speech_is_heard_and_silence_and_noise_are_not(params: Params):
    cfg = params.infer.speech.no_speech
    rng = np.random.default_rng(0)
    missed = []
    for voice in VOICES:  # every espeak-ng French voice of train and test, clean and noisy
        for text in SENTENCES:
            x = resample(*speech(text, voice))
            for clip, how in ((x, "clean"), (add_noise(x, 20, rng), "20 dB"), (0.05 * x, "quiet")):
                if not has_speech(clip, cfg):
                    missed.append((voice, text, how))
    assert missed == []
    quiet = [np.zeros(6 * SAMPLE_RATE, np.float32), colored_noise(0, 1e-4, 0)]
    noises = [colored_noise(a, level, seed) for a in (0, 1, 2) for level in (0.03, 0.3, 1.0)
              for seed in range(2)]  # fmt: skip
    hum = (0.3 * np.sin(2 * np.pi * 50 * np.arange(6 * SAMPLE_RATE) / SAMPLE_RATE)).astype(
        np.float32
    )
    heard = [i for i, clip in enumerate([*quiet, *noises, hum]) if has_speech(clip, cfg)]
    assert heard == []


class InventingModel:
    """A speech variant's interface (processor, generate, generate_batches; no separate encode /
    decode) whose model invents a sentence for anything it is given, as Whisper does for
    silence; it counts the clips it decodes."""

    name = "inventing"

    def __init__(self) -> None:
        self.processor = WhisperFeatureExtractor(chunk_length=8)
        self.decoded = 0

    def generate(self, feats: object, max_tokens: int) -> list[str]:
        self.decoded += len(feats)  # type: ignore[arg-type]
        return [INVENTED] * len(feats)  # type: ignore[arg-type]

    def generate_batches(
        self, batches: Iterable[object], max_tokens: int, workers: int = 1
    ) -> Iterator[list[str]]:
        # as Variant.generate_batches without decodes_apart: one batch after the other
        for feats in batches:
            yield self.generate(feats, max_tokens)


def test_silence_gives_an_empty_flagged_text_and_is_never_decoded(params: Params):
    model = InventingModel()
    silence = colored_noise(2, 0.3, 1, seconds=20.0)  # brown noise: three 8 s chunks
    chunks, text = transcribe(model, silence, params.infer)  # type: ignore[arg-type]
    result = transcript_result("noise.wav", 20.0, chunks, text)
    assert text == "" and result["no_speech"] is True and model.decoded == 0
    assert len(result["chunks"]) >= 3 and all(c["no_speech"] for c in result["chunks"])
    json.dumps(result)  # the service returns it as JSON

    words = resample(*speech(SENTENCES[0], "m6"))  # a test voice
    chunks, text = transcribe(model, words, params.infer)  # type: ignore[arg-type]
    assert text == INVENTED and model.decoded == 1
    assert transcript_result("s.wav", 2.0, chunks, text)["no_speech"] is False


def test_the_check_is_a_param(params: Params):
    quiet = params.infer.speech.no_speech.model_copy(update={"check": False})
    off = params.infer.model_copy(
        update={"speech": params.infer.speech.model_copy(update={"no_speech": quiet})}
    )
    model = InventingModel()
    _, text = transcribe(model, np.zeros(SAMPLE_RATE, np.float32), off)  # type: ignore[arg-type]
    assert text == INVENTED and model.decoded == 1  # as before the check: the model decides
