"""What speech goes through on its way to a microphone, applied to synthetic train clips.

espeak-ng speaks into nothing: no room, no phone line, one tempo per voice. A model fine-tuned
on that alone learns the clean synthesizer's sound and reads real recordings worse (issue 34).
Each train clip draws, from the seed: a speed (resampling, tempo and pitch together, as the
speed perturbation of Kaldi recipes), a room (reverberation of a given RT60), a band limit
(narrowband telephone, wideband VoIP) and the colour of its noise (white, pink, brown). The
val and test splits stay as spoken, so their figures compare across augmentation settings.
(The noise itself is sonfolio.speech.common.audio.add_noise, in the chosen colour.)

Written here with numpy and scipy rather than with audiomentations: that library pulls numba,
llvmlite, librosa and scikit-learn (~150 MB) for what is four filters here, and its room
simulation needs pyroomacoustics or recorded impulse responses that cannot be fetched offline.
The room is the standard statistical model instead (Polack's): an exponentially decaying
noise tail after the direct sound.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import signal

from sonfolio.speech.common.audio import SAMPLE_RATE, resample

if TYPE_CHECKING:
    from sonfolio.config.data import SpeechAugment

REVERB_TAIL_S = 0.3  # the room's tail kept after the last sample spoken


@dataclass(frozen=True)
class ClipAugment:
    """One clip's draw; None or 1.0 leaves that part out."""

    speed: float
    rt60_s: float | None
    band_hz: tuple[int, int] | None
    noise_color: str


def draw(cfg: SpeechAugment, rng: random.Random) -> ClipAugment:
    """One clip's augmentation, every value drawn (in a fixed order) whether used or not, so a
    fraction changed in params.yaml does not reshuffle the other clips' draws."""
    speed = rng.uniform(*cfg.speed)
    reverb, rt60 = rng.random() < cfg.reverb_fraction, rng.uniform(*cfg.rt60_s)
    banded, band = rng.random() < cfg.band_fraction, rng.choice(cfg.bands_hz)
    color = rng.choice(cfg.noise_colors)
    return ClipAugment(
        speed=round(speed, 3),
        rt60_s=round(rt60, 3) if reverb else None,
        band_hz=(int(band[0]), int(band[1])) if banded else None,
        noise_color=color,
    )


def change_speed(x: np.ndarray, factor: float) -> np.ndarray:
    """Play `x` `factor` times faster (shorter and higher for factor > 1)."""
    if factor == 1.0:
        return x
    # the clip read as if sampled at factor * 16 kHz, brought back to 16 kHz (on a 10 Hz grid,
    # which keeps the FFT resampler's rate ratio small)
    return resample(x, int(round(SAMPLE_RATE * factor / 10)) * 10, SAMPLE_RATE)


def room_response(rt60_s: float, rng: np.random.Generator) -> np.ndarray:
    """A room's impulse response: the direct sound, then noise decaying by 60 dB in rt60_s."""
    n = max(2, int(rt60_s * SAMPLE_RATE))
    t = np.arange(n) / SAMPLE_RATE
    tail = rng.standard_normal(n) * np.exp(-3.0 * math.log(10) * t / rt60_s)
    tail[0] = 0.0
    # direct-to-reverberant energy ratio about 0 dB: the tail as loud as the direct sound
    tail *= 1.0 / math.sqrt(float(np.sum(np.square(tail))) or 1.0)
    tail[0] = 1.0
    return tail


def reverberate(x: np.ndarray, rt60_s: float, rng: np.random.Generator) -> np.ndarray:
    """`x` in a room; the output keeps `x`'s loudness and at most REVERB_TAIL_S of tail."""
    y = signal.fftconvolve(x.astype(np.float64), room_response(rt60_s, rng))
    y = y[: x.size + int(REVERB_TAIL_S * SAMPLE_RATE)]
    return _match_rms(y, x)


def band_limit(x: np.ndarray, band_hz: tuple[int, int]) -> np.ndarray:
    """A phone line's pass band: 4th-order Butterworth band-pass."""
    sos = signal.butter(4, band_hz, btype="bandpass", fs=SAMPLE_RATE, output="sos")
    return _match_rms(signal.sosfilt(sos, x.astype(np.float64)), x)


def apply(x: np.ndarray, aug: ClipAugment, rng: np.random.Generator) -> np.ndarray:
    """Speed, then the room, then the line (noise is added after, by the caller)."""
    x = change_speed(x, aug.speed)
    if aug.rt60_s is not None:
        x = reverberate(x, aug.rt60_s, rng)
    if aug.band_hz is not None:
        x = band_limit(x, aug.band_hz)
    return x.astype(np.float32)


def _match_rms(y: np.ndarray, like: np.ndarray) -> np.ndarray:
    """`y` scaled to `like`'s RMS, peak-limited to 0.99 (no clipping in the 16-bit WAV)."""
    target = float(np.sqrt(np.mean(np.square(like, dtype=np.float64))))
    have = float(np.sqrt(np.mean(np.square(y))))
    y = y * (target / have) if have > 0.0 else y
    peak = float(np.max(np.abs(y))) if y.size else 0.0
    return (y * (0.99 / peak) if peak > 0.99 else y).astype(np.float32)
