"""LogMel, the numpy-only log-mel features: the same features as transformers'
WhisperFeatureExtractor built from the same config (both its torch and its numpy path), a
config it cannot honour refused, and torch and transformers left unloaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import transformers.models.whisper.feature_extraction_whisper as whisper_fe
from transformers import WhisperFeatureExtractor

from sonfolio.speech.common.audio import SAMPLE_RATE, from_pcm16, resample
from sonfolio.speech.common.logmel import LogMel
from sonfolio.speech.data.espeak import synthesize

ROOT = Path(__file__).resolve().parents[2]
SENTENCE = "Nous avons mangé chez Hélène hier soir, à Saint-Étienne."
# The largest difference allowed, in feature units ((log10 + 4) / 4), per reference path.
# LogMel computes what the numpy path computes, in float64 as it does: they agree to float32
# rounding (1.2e-7 measured). torch's STFT runs in float32, whose rounding shows in low-power
# mel bins near the max - 8 floor: transformers' own two paths differ by up to 1.03e-4 here
# (30 s window, "longer" case; 2-7e-5 in the others), and LogMel differs from torch by as much.
TOLERANCE = {"numpy": 1e-6, "torch": 2e-4}

# A real preprocessor_config.json from our export (an 8 s window).
CONFIG_8 = {
    "chunk_length": 8,
    "dither": 0.0,
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 80,
    "hop_length": 160,
    "n_fft": 400,
    "n_samples": 128000,
    "nb_max_frames": 800,
    "padding_side": "right",
    "padding_value": 0.0,
    "processor_class": "WhisperProcessor",
    "return_attention_mask": False,
    "sampling_rate": 16000,
}
# OpenAI's 30 s window.
CONFIG_30 = {**CONFIG_8, "chunk_length": 30, "n_samples": 480000, "nb_max_frames": 3000}


def french_speech(seconds: float) -> np.ndarray:
    """Real speech (espeak-ng, resampled to 16 kHz), float32, cut or repeated to `seconds`:
    pauses and a wide dynamic range, unlike noise."""
    pcm, rate = synthesize(SENTENCE, "m1", 175, 50)
    x = resample(from_pcm16(pcm), rate)
    return np.resize(x, round(seconds * SAMPLE_RATE))


def tones(n: int, seed: int) -> np.ndarray:
    """A chord (220, 1234.5 and 6000 Hz) in white noise, float32: energy in the linear and the
    log part of the mel scale."""
    t = np.arange(n) / SAMPLE_RATE
    rng = np.random.default_rng(seed)
    x = sum(a * np.sin(2 * np.pi * f * t) for a, f in ((0.3, 220), (0.1, 1234.5), (0.05, 6000)))
    return (x + 0.01 * rng.standard_normal(n)).astype(np.float32)


def clips_for(case: str, n_samples: int) -> np.ndarray | list[np.ndarray]:
    """The input of each case, sized for a window of `n_samples`."""
    if case == "short":
        return french_speech(1.0)
    if case == "exact":
        return tones(n_samples, seed=1)
    if case == "longer":  # cut to the window
        return tones(n_samples + 3 * SAMPLE_RATE + 77, seed=2)
    if case == "silence":
        return np.zeros(SAMPLE_RATE, dtype=np.float32)
    assert case == "batch"
    return [
        french_speech(2.5),
        np.zeros(800, dtype=np.float32),
        tones(n_samples, seed=3),
        french_speech(0.3).astype(np.float64),  # transformers casts to float32 first
        tones(n_samples + 12345, seed=4),
    ]


@pytest.fixture(params=["torch", "numpy"])
def reference(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which of WhisperFeatureExtractor's two paths computes the expected features: torch's
    STFT (float32; what training used) or its numpy loop (float64, what LogMel mirrors)."""
    if request.param == "torch" and not whisper_fe.is_torch_available():
        pytest.skip("torch is not installed: WhisperFeatureExtractor has only its numpy path")
    if request.param == "numpy":
        monkeypatch.setattr(whisper_fe, "is_torch_available", lambda: False)
    return request.param


@pytest.mark.parametrize("config", [CONFIG_8, CONFIG_30], ids=["8s", "30s"])
@pytest.mark.parametrize("case", ["short", "exact", "longer", "silence", "batch"])
def test_features_match_transformers(config: dict, case: str, reference: str) -> None:
    clips = clips_for(case, config["n_samples"])
    extractor = WhisperFeatureExtractor(**config)
    want = extractor(clips, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
    got = LogMel.from_config(config)(clips, sampling_rate=SAMPLE_RATE)["input_features"]

    batch = len(clips) if isinstance(clips, list) else 1
    assert got.shape == want.shape == (batch, config["feature_size"], config["nb_max_frames"])
    assert got.dtype == np.float32
    assert np.abs(got - want).max() <= TOLERANCE[reference]


def test_silence_is_the_floor() -> None:
    """All zeros: every power is at the 1e-10 floor, so every feature is (-10 + 4) / 4."""
    got = LogMel.from_config(CONFIG_8)(np.zeros(100, dtype=np.float32))["input_features"]
    assert np.all(got == -1.5)


def test_from_folder_matches_transformers_loading_the_same_folder(tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(CONFIG_8), encoding="utf-8")
    ours = LogMel.from_folder(tmp_path)
    theirs = WhisperFeatureExtractor.from_pretrained(tmp_path)
    for key in ("feature_size", "sampling_rate", "hop_length", "n_fft", "chunk_length"):
        assert getattr(ours, key) == getattr(theirs, key), key
    assert (ours.n_samples, ours.nb_max_frames) == (theirs.n_samples, theirs.nb_max_frames)
    assert np.array_equal(ours.mel_filters, theirs.mel_filters)


def test_importing_and_using_it_loads_neither_torch_nor_transformers(tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(CONFIG_8), encoding="utf-8")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import numpy as np\n"
        "from sonfolio.speech.common.logmel import LogMel\n"
        f"LogMel.from_folder(Path({str(tmp_path)!r}))(np.ones(16000, np.float32), 16000)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"dither": 1e-5}, "dither = 1e-05; only 0.0"),
        ({"feature_extractor_type": "SeamlessM4TFeatureExtractor"}, "feature_extractor_type"),
        ({"padding_side": "left"}, "padding_side"),
        ({"hop_length": 0}, "hop_length = 0 must be a positive integer"),
        ({"feature_size": 80.0}, "feature_size = 80.0 must be a positive integer"),
        ({"n_samples": 480000}, "n_samples = 480000 but chunk_length \\* sampling_rate = 128000"),
        ({"nb_max_frames": 3000}, "nb_max_frames = 3000"),
        ({"padding_value": None}, "padding_value = None must be a number"),
    ],
)
def test_a_config_it_cannot_honour_is_refused(change: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LogMel.from_config({**CONFIG_8, **change})


def test_a_missing_key_is_named_with_the_file(tmp_path: Path) -> None:
    config = {k: v for k, v in CONFIG_8.items() if k != "n_fft"}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"preprocessor_config\.json: missing key\(s\) n_fft"):
        LogMel.from_folder(tmp_path)


def test_a_folder_without_the_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"preprocessor_config\.json not found"):
        LogMel.from_folder(tmp_path)


def test_another_sampling_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="at 8000 Hz.*16000 Hz: resample"):
        LogMel.from_config(CONFIG_8)(np.zeros(8000, np.float32), sampling_rate=8000)


def test_only_numpy_is_returned() -> None:
    with pytest.raises(ValueError, match="return_tensors = 'pt'"):
        LogMel.from_config(CONFIG_8)(np.zeros(100, np.float32), return_tensors="pt")


def test_stereo_is_refused() -> None:
    with pytest.raises(ValueError, match="clip 0 has shape \\(100, 2\\): pass mono audio"):
        LogMel.from_config(CONFIG_8)([np.zeros((100, 2), np.float32)])
