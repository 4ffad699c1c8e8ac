"""Our Silero VAD (sonfolio.speech.decode.silero) against faster-whisper's: the same
probabilities and the same segments, to the sample, on espeak-ng speech, noise and silence;
faster-whisper itself (PyAV, CTranslate2) never imported; a clear error where it is absent."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from faster_whisper.vad import VadOptions, get_speech_timestamps, get_vad_model

from sonfolio.config.params import Params
from sonfolio.speech.common.audio import SAMPLE_RATE, add_noise, from_pcm16, resample
from sonfolio.speech.data.espeak import synthesize
from sonfolio.speech.decode import silero
from sonfolio.speech.decode.voice import speech_s

ROOT = Path(__file__).resolve().parents[2]
SENTENCE = "Il fait beau à Paris ce matin. Bonjour, je voudrais un café."


def spoken(voice: str = "m1", text: str = SENTENCE) -> np.ndarray:
    """espeak-ng French, resampled to 16 kHz, float32."""
    pcm, rate = synthesize(text, voice, 175, 50)
    return resample(from_pcm16(pcm), rate)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SAMPLE_RATE), np.float32)


def pink(seconds: float, level: float, seed: int) -> np.ndarray:
    """Noise with power ~ 1/f, peaking at `level`."""
    n = round(seconds * SAMPLE_RATE)
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    f = np.fft.rfftfreq(n)
    f[0] = f[1]
    y = np.fft.irfft(spectrum / np.sqrt(f), n)
    return (level * y / np.abs(y).max()).astype(np.float32)


def clip(case: str) -> np.ndarray:
    """The input of each case."""
    rng = np.random.default_rng(0)
    if case == "speech":
        return spoken("m1")
    if case == "female voice, 10 dB SNR":
        return add_noise(spoken("f3"), 10, rng)
    if case == "pauses":  # 0.6 s closes a segment, 0.05 s does not (100 ms needed), 2 s does
        words = [spoken(v, t) for v, t in (("m3", "Bonjour."), ("m6", "Merci."), ("f1", "Oui."))]
        parts = [silence(0.3), words[0], silence(0.6), words[1], silence(0.05), words[2]]
        return np.concatenate([*parts, silence(2.0), words[0]])
    if case == "white noise":
        return (0.3 * rng.standard_normal(5 * SAMPLE_RATE)).astype(np.float32)
    if case == "pink noise":
        return pink(5.0, 0.5, seed=1)
    if case == "silence":
        return silence(3.0)
    if case == "a few windows":  # 3 windows + 470 samples: the last 64 are zeroed, as theirs
        return spoken("m2")[4000 : 4000 + 3 * 512 + 470]
    assert case == "a multiple of 512"  # a whole window of padding after it
    return spoken("m4")[: 60 * 512]


CASES = [
    "speech",
    "female voice, 10 dB SNR",
    "pauses",
    "white noise",
    "pink noise",
    "silence",
    "a few windows",
    "a multiple of 512",
]


def theirs(audio: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    """faster-whisper's segments with voice.py's options."""
    options = VadOptions(threshold=threshold, speech_pad_ms=0, min_silence_duration_ms=100)
    return [(s["start"], s["end"]) for s in get_speech_timestamps(audio.copy(), options)]


@pytest.mark.parametrize("case", CASES)
def test_probabilities_and_segments_are_faster_whispers(case: str, params: Params) -> None:
    audio = clip(case)
    padded = np.pad(audio, (0, 512 - audio.size % 512))
    assert np.array_equal(silero.speech_probs(audio), get_vad_model()(padded))
    for threshold in (params.infer.speech.no_speech.vad_threshold, 0.3, 0.8):
        assert silero.speech_segments(audio, threshold, 100) == theirs(audio, threshold)


def test_the_cases_hold_what_they_say(params: Params) -> None:
    # So that the comparison above covers speech, pauses and no speech at all.
    threshold = params.infer.speech.no_speech.vad_threshold
    assert len(silero.speech_segments(clip("pauses"), threshold, 100)) == 3
    assert silero.speech_segments(clip("speech"), threshold, 100) != []
    for case in ("white noise", "pink noise", "silence"):
        assert silero.speech_segments(clip(case), threshold, 100) == []


def test_speech_s_counts_faster_whispers_segments(params: Params) -> None:
    cfg = params.infer.speech.no_speech
    audio = clip("pauses")
    expected = sum(end - start for start, end in theirs(audio, cfg.vad_threshold)) / SAMPLE_RATE
    assert speech_s(audio, cfg) == expected > 1.0


def test_speech_s_leaves_faster_whisper_unimported() -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import numpy as np\n"
        "from sonfolio.config.params import load_params\n"
        "from sonfolio.speech.decode.voice import speech_s\n"
        "cfg = load_params(Path('params.yaml')).infer.speech.no_speech\n"
        "noise = (0.3 * np.random.default_rng(0).standard_normal(80000)).astype(np.float32)\n"
        "print(speech_s(noise, cfg))\n"
        "print(' '.join(m for m in ('onnxruntime', 'faster_whisper', 'av', 'ctranslate2')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    assert out == ["0.0", "onnxruntime"]  # the VAD ran (above the energy floor), alone


def test_no_faster_whisper_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "faster_whisper" else find_spec(name, *a),
    )
    with pytest.raises(silero.SileroMissing) as err:
        silero.model_path()
    assert "faster-whisper package" in str(err.value)
    assert "pip install faster-whisper" in str(err.value)
    assert "infer.speech.no_speech.check: false" in str(err.value)
