"""Audio as the speech track stores it: 16 kHz mono, 16-bit PCM WAV.

Whisper's feature extractor takes 16 kHz mono only, so every clip, synthetic or from a corpus,
is converted once when the dataset is built. Reading uses soundfile (libsndfile: WAV, FLAC,
OGG, MP3; FLAC is what Multilingual LibriSpeech stores); writing uses the stdlib `wave` module.
"""

from __future__ import annotations

import io
import math
import wave
from pathlib import Path

import numpy as np
import soundfile

SAMPLE_RATE = 16_000  # Hz; Whisper's only input rate


class AudioError(ValueError):
    """A clip that cannot be used; `reason` is the key it is counted under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def resample(x: np.ndarray, sr_in: int, sr_out: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling of a whole clip by FFT; float32 in, float32 out.

    Cutting (or zero-padding) the spectrum at the new Nyquist frequency is an ideal low-pass,
    so downsampling does not alias. The clip is padded to a multiple of the rate ratio's
    denominator so that the output length is exact (22,050 -> 16,000 Hz: 441 -> 320 samples).
    """
    if sr_in == sr_out or x.size == 0:
        return x.astype(np.float32, copy=False)
    g = math.gcd(sr_in, sr_out)
    up, down = sr_out // g, sr_in // g
    n = x.size
    padded = np.pad(x.astype(np.float64), (0, (-n) % down))
    n_out = padded.size * up // down
    spec = np.fft.rfft(padded)
    keep = n_out // 2 + 1
    spec = spec[:keep] if keep <= spec.size else np.pad(spec, (0, keep - spec.size))
    y = np.fft.irfft(spec, n_out) * (n_out / padded.size)
    return y[: -(-n * up // down)].astype(np.float32)


def colored_noise(n: int, color: str, rng: np.random.Generator) -> np.ndarray:
    """Unit-power noise whose power falls as 1/f^0 (white), 1/f (pink) or 1/f^2 (brown)."""
    white = rng.standard_normal(n)
    if color == "white" or n < 2:
        return white
    exponent = {"pink": 0.5, "brown": 1.0}[color]  # on the amplitude spectrum
    spec = np.fft.rfft(white)
    f = np.fft.rfftfreq(n, 1.0 / SAMPLE_RATE)
    f[0] = f[1]
    noise = np.fft.irfft(spec / f**exponent, n)
    return noise / (float(np.sqrt(np.mean(np.square(noise)))) or 1.0)


def add_noise(
    x: np.ndarray, snr_db: float, rng: np.random.Generator, color: str = "white"
) -> np.ndarray:
    """Add gaussian noise of `color` (white, pink, brown) at `snr_db` (signal power / noise
    power, in dB)."""
    power = float(np.mean(np.square(x, dtype=np.float64)))
    if power == 0.0:
        return x
    noise = colored_noise(x.size, color, rng) * math.sqrt(power / 10 ** (snr_db / 10))
    return (x + noise).astype(np.float32)


def to_pcm16(x: np.ndarray) -> np.ndarray:
    """float in [-1, 1] -> int16, clipping what lies outside."""
    return np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)


def from_pcm16(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32) / 32768.0).astype(np.float32)


def write_wav(path: Path, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """16-bit mono WAV; `pcm` is int16 of shape (n,)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.astype("<i2").tobytes())


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A WAV this module wrote: (int16 samples, sample rate)."""
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"), w.getframerate()


def decode(data: bytes | Path) -> np.ndarray:
    """Any file libsndfile reads (bytes or a path) -> float32 mono at SAMPLE_RATE.

    Raises:
        AudioError: reason `missing_file`, `empty_audio` (no samples) or `unreadable` (not
            decodable audio).
    """
    if isinstance(data, Path) and not data.is_file():
        raise AudioError("missing_file", f"{data} does not exist")
    if (len(data) if isinstance(data, bytes) else data.stat().st_size) == 0:
        raise AudioError("empty_audio", "0 bytes")
    try:
        source = io.BytesIO(data) if isinstance(data, bytes) else data
        x, sr = soundfile.read(source, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, OSError) as err:
        raise AudioError("unreadable", str(err)) from err
    if x.shape[0] == 0:
        raise AudioError("empty_audio", "no samples")
    return resample(x.mean(axis=1), sr)  # (frames, channels) -> mono
