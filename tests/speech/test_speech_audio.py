"""Audio helpers and espeak-ng: real speech, at 16 kHz, that follows its settings."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile

from sonfolio.speech.common.audio import (
    SAMPLE_RATE,
    AudioError,
    add_noise,
    decode,
    from_pcm16,
    read_wav,
    resample,
    to_pcm16,
    write_wav,
)
from sonfolio.speech.data.espeak import EspeakError, synthesize

SENTENCE = "Les enfants ont attendu longtemps à l'hôpital de Saint-Étienne."


def speech(text: str = SENTENCE, variant: str = "m1", rate: int = 175, pitch: int = 50):
    pcm, rate_hz = synthesize(text, variant, rate, pitch)
    return resample(from_pcm16(pcm), rate_hz)


def frame_rms(x: np.ndarray, n: int = 400) -> np.ndarray:
    frames = x[: x.size // n * n].reshape(-1, n)
    return np.sqrt(np.mean(frames**2, axis=1))


def f0_hz(x: np.ndarray) -> float:
    """Median pitch of the loud frames, by autocorrelation (60-400 Hz)."""
    n = int(0.04 * SAMPLE_RATE)
    frames = np.lib.stride_tricks.sliding_window_view(x, n)[:: n // 2]
    energy = np.sqrt(np.mean(frames**2, axis=1))
    lo, hi = SAMPLE_RATE // 400, SAMPLE_RATE // 60
    pitches = []
    for f in frames[energy > 0.3 * energy.max()]:
        ac = np.correlate(f - f.mean(), f - f.mean(), "full")[n - 1 :]
        pitches.append(SAMPLE_RATE / (lo + np.argmax(ac[lo:hi])))
    return float(np.median(pitches))


def test_resample_keeps_a_tone_and_the_exact_length() -> None:
    t = np.arange(22050) / 22050  # 1 s
    y = resample(np.sin(2 * np.pi * 440 * t).astype(np.float32), 22050)
    assert y.size == SAMPLE_RATE
    spectrum = np.abs(np.fft.rfft(y))
    assert abs(np.argmax(spectrum) - 440) <= 1  # 1 Hz bins over 1 s
    assert np.sqrt(np.mean(y[1000:-1000] ** 2)) == pytest.approx(1 / np.sqrt(2), rel=0.01)


def test_resample_removes_what_16_khz_cannot_hold() -> None:
    t = np.arange(22050) / 22050
    y = resample(np.sin(2 * np.pi * 10_000 * t).astype(np.float32), 22050)  # above 8 kHz
    assert np.sqrt(np.mean(y**2)) < 0.01  # no alias folded back to 6 kHz


def test_noise_is_added_at_the_asked_snr() -> None:
    clean = speech()
    noisy = add_noise(clean, 15.0, np.random.default_rng(0))
    snr = 10 * np.log10(np.mean(clean**2) / np.mean((noisy - clean) ** 2))
    assert snr == pytest.approx(15.0, abs=0.3)


def test_wav_round_trip_is_16_bit_mono_16_khz(tmp_path: Path) -> None:
    pcm = to_pcm16(speech())
    write_wav(tmp_path / "a.wav", pcm)
    info = soundfile.info(str(tmp_path / "a.wav"))
    assert (info.samplerate, info.channels, info.subtype) == (SAMPLE_RATE, 1, "PCM_16")
    back, rate = read_wav(tmp_path / "a.wav")
    assert rate == SAMPLE_RATE and np.array_equal(back, pcm)


def test_decode_converts_stereo_44k_flac_to_16k_mono() -> None:
    x = speech()
    stereo = np.stack([resample(x, SAMPLE_RATE, 44100)] * 2, axis=1)
    buf = io.BytesIO()
    soundfile.write(buf, stereo, 44100, format="FLAC")
    y = decode(buf.getvalue())
    assert y.ndim == 1 and abs(y.size - x.size) <= 1
    assert np.corrcoef(x[: y.size], y[: x.size])[0, 1] > 0.99


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty_audio"),
        (b"this is not audio", "unreadable"),
        (Path("/nope.wav"), "missing_file"),
    ],
)
def test_bad_audio_raises_with_its_reason(data: bytes | Path, reason: str) -> None:
    with pytest.raises(AudioError) as err:
        decode(data)
    assert err.value.reason == reason


def test_espeak_makes_real_speech_not_silence() -> None:
    x = speech()
    rms = frame_rms(x)
    assert np.sqrt(np.mean(x**2)) > 0.03  # about -30 dBFS or louder
    # speech alternates loud syllables and near-silent gaps: a wide dynamic range
    assert np.percentile(rms, 90) > 5 * max(np.percentile(rms, 10), 1e-5)
    assert 1.5 < x.size / SAMPLE_RATE < 6  # ~10 words at 175 words per minute


def test_duration_follows_text_length_and_rate() -> None:
    counting = "un deux trois quatre cinq six sept huit neuf dix onze douze"
    texts = [counting.rsplit(" ", 12 - n)[0] for n in (2, 4, 6, 8, 10, 12)]
    durations = [speech(t).size / SAMPLE_RATE for t in texts]
    assert all(a < b for a, b in zip(durations, durations[1:], strict=False))
    assert np.corrcoef([len(t) for t in texts], durations)[0, 1] > 0.95
    slow, fast = speech(rate=120).size, speech(rate=300).size
    assert slow > 1.8 * fast


def test_voice_variants_differ_and_female_ones_are_higher() -> None:
    male, female = speech(variant="m1"), speech(variant="f2")
    assert not np.array_equal(male[: female.size], female[: male.size])
    assert f0_hz(female) > 1.4 * f0_hz(male)
    assert f0_hz(speech(pitch=90)) > 1.2 * f0_hz(speech(pitch=10))


def test_unknown_voice_variant_fails() -> None:
    with pytest.raises(EspeakError, match="no voice variant 'm99'"):
        synthesize("bonjour", "m99", 175, 50)
