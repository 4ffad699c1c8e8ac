"""An audio file or upload -> 16 kHz mono float32 within `infer.speech.audio_limits`, in bounded
memory.

Why not `sonfolio.speech.common.audio.decode` (what the data stage uses): it reads the whole file at
its own rate and resamples it in one FFT, so its memory grows with duration x source rate (a
110 KB FLAC of an hour of silence at 192 kHz took 1.2 GB) and nothing bounds the duration. Here
the header (libsndfile's, through soundfile) is checked first: duration, sample rate, channels.
Then the samples are read in blocks, mixed to mono and resampled block by block, and counted:
a header that claims fewer samples than the stream holds is refused at the limit, never
expanded. Memory is the 16 kHz output (at most `max_audio_s` x 64 kB/s: 38 MB at 600 s) plus a
few blocks of about `BLOCK_S`, whatever the source rate.

The resampler is the training data's own (`speech.audio.resample`, an ideal FFT low-pass),
run on overlapping blocks: no resampling library is a dependency (scipy, soxr, torchaudio are
not installed), and the same filter keeps inference input like the training input. Each block
is resampled with `MARGIN_S` of its neighbours on both sides and only its middle is kept, so the
FFT's wrap-around at a block's edges falls in the discarded margins.
"""

from __future__ import annotations

import io
import logging
import math
from typing import IO, TYPE_CHECKING

import numpy as np
import soundfile

from sonfolio.speech.common.audio import SAMPLE_RATE, resample

if TYPE_CHECKING:
    from sonfolio.config.infer import AudioLimits

log = logging.getLogger(__name__)

BLOCK_S = 10.0  # seconds of source audio resampled at once: ~60 MB of FFT work at 192 kHz
MARGIN_S = 0.25  # neighbours' seconds each block is resampled with (the filter's tails)
UNKNOWN_FRAMES = 2**62  # libsndfile reports SF_COUNT_MAX frames when the header has none


class AudioRefused(ValueError):
    """Audio that `infer.speech.audio_limits` refuses, or that libsndfile cannot read.

    Attributes:
        reason: "too_long", "sample_rate", "channels", "unreadable" or "empty".
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _limit(what: str, seen: str, param: str, allowed: str) -> str:
    limit = f"infer.speech.audio_limits.{param}"
    return f"{what} is {seen}; {limit} is {allowed}: raise it in params.yaml"


def check_header(info: soundfile.SoundFile, name: str, limits: AudioLimits) -> None:
    """Refuse, before a sample is decoded, what the header says is over a limit.

    Raises:
        AudioRefused: too long, a sample rate outside the range, or too many channels.
    """
    rate, channels = info.samplerate, info.channels
    if not limits.min_sample_rate <= rate <= limits.max_sample_rate:
        param = "min_sample_rate" if rate < limits.min_sample_rate else "max_sample_rate"
        allowed = getattr(limits, param)
        raise AudioRefused(
            "sample_rate", _limit(f"{name}'s sample rate", f"{rate:,} Hz", param, f"{allowed:,}")
        )
    if channels > limits.max_channels:
        raise AudioRefused(
            "channels",
            _limit(f"{name}", f"{channels} channels", "max_channels", str(limits.max_channels)),
        )
    if info.frames >= UNKNOWN_FRAMES:  # libsndfile's "length unknown" (a streamed FLAC)
        raise AudioRefused(
            "unreadable", f"{name}'s header gives no length: re-encode it as a complete file"
        )
    seconds = info.frames / rate
    if seconds > limits.max_audio_s:
        raise AudioRefused(
            "too_long",
            _limit(
                f"{name}",
                f"{seconds:,.1f}".removesuffix(".0") + " s long",
                "max_audio_s",
                f"{limits.max_audio_s:g}",
            ),
        )


# bytes a sample of a WAV's subtype takes (the ones whose size is fixed)
_WAV_SAMPLE_BYTES = {
    "PCM_U8": 1, "PCM_S8": 1, "ULAW": 1, "ALAW": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4,
    "FLOAT": 4, "DOUBLE": 8,
}  # fmt: skip
_WAV_SLACK = 64 * 1024  # bytes past the samples a WAV may carry (LIST, cue, bext chunks...)


def check_wav_length(info: soundfile.SoundFile, size: int, name: str) -> None:
    """Refuse a WAV whose file holds far more samples than its header's length (a recorder
    that died before writing the header, a crafted file): libsndfile reads no further than the
    header says, so the rest would be dropped unseen.

    Raises:
        AudioRefused: "corrupt", with both lengths.
    """
    width = _WAV_SAMPLE_BYTES.get(info.subtype)
    if info.format != "WAV" or width is None:
        return
    claimed = info.frames * info.channels * width
    if size - claimed <= _WAV_SLACK:
        return
    held = (size - 44) / (info.channels * width * info.samplerate)
    raise AudioRefused(
        "corrupt",
        f"{name}: its header says {info.frames / info.samplerate:,.1f} s, but the file holds "
        f"about {held:,.1f} s of samples: the header is wrong, and only its length would be "
        "read; re-save the file (e.g. ffmpeg -i in.wav out.wav)",
    )


# The rate ratio's denominator past which a rate is resampled as the nearest multiple of 100 Hz:
# every usual rate has a small one (44,100 Hz: 441; 48,000: 3), while a rate with no common
# factor with 16 kHz (a prime such as 191,999 Hz) makes every FFT a prime length (Bluestein's
# algorithm: 455 MB and 8.7 s for 60 s at 191,999 Hz, against 190 MB and 2.6 s at 192,000).
MAX_RATE_DENOMINATOR = 1000


def resampling_rate(rate: int) -> int:
    """The rate a clip is resampled from: `rate` itself, or for an unusual rate (one whose
    ratio to 16 kHz has a denominator over MAX_RATE_DENOMINATOR) the nearest multiple of
    100 Hz, whose ratio's denominator is at most 1,920: at most 50 Hz off, a change of speed
    and pitch of 0.6 % at 8 kHz and 0.03 % at 192 kHz, which speech recognition does not hear."""
    if rate // math.gcd(rate, SAMPLE_RATE) <= MAX_RATE_DENOMINATOR:
        return rate
    nearest = max(100, round(rate / 100) * 100)
    log.info("a %s Hz clip is resampled as %s Hz (an unusual rate)", f"{rate:,}", f"{nearest:,}")
    return nearest


class BlockResampler:
    """Mono blocks of any length at `rate` in, 16 kHz float32 out, with the same result (to
    float32 precision) as resampling the whole clip at once, in memory of a few blocks."""

    def __init__(self, rate: int, out_frames: int) -> None:
        rate = resampling_rate(rate)
        g = math.gcd(rate, SAMPLE_RATE)
        self.rate, self.up, self.down = rate, SAMPLE_RATE // g, rate // g
        # Block and margin lengths are whole multiples of `down`, so each maps to a whole
        # number of output samples and the kept middles join without a gap or a repeat.
        self.block = self.down * max(1, round(BLOCK_S * rate / self.down))
        self.margin = self.down * max(1, math.ceil(MARGIN_S * rate / self.down))
        self.history = np.zeros(0, np.float32)  # the last `margin` samples already emitted
        self.pending: list[np.ndarray] = []
        self.n_pending = 0
        self.out = np.empty(out_frames, np.float32)  # preallocated: no growing copies
        self.n_out = 0

    def _emit(self, y: np.ndarray) -> None:
        if self.n_out + y.size > self.out.size:  # more than planned: grow once, rarely
            self.out = np.concatenate([self.out[: self.n_out], np.empty(y.size, np.float32)])
        self.out[self.n_out : self.n_out + y.size] = y
        self.n_out += y.size

    def _step(self, final: bool) -> None:
        x = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        take = x.size if final else self.block
        segment = np.concatenate([self.history, x[: take + (0 if final else self.margin)]])
        y = resample(segment, self.rate)
        skip = self.history.size * self.up // self.down
        keep = -(-take * self.up // self.down)
        self._emit(y[skip : skip + keep])
        self.history = x[max(0, take - self.margin) : take]
        rest = x[take:]
        self.pending, self.n_pending = ([rest] if rest.size else []), rest.size

    def feed(self, mono: np.ndarray) -> None:
        self.pending.append(mono)
        self.n_pending += mono.size
        while self.n_pending >= self.block + self.margin:
            self._step(final=False)

    def finish(self) -> np.ndarray:
        if self.n_pending:
            self._step(final=True)
        return self.out[: self.n_out]


def decode_bounded(source: IO[bytes], name: str, limits: AudioLimits) -> np.ndarray:
    """An open audio file -> float32 mono at 16 kHz, refused at any of `limits`.

    Raises:
        AudioRefused: unreadable, empty, or over a limit (the message names the limit, the
            value seen and the param to raise).
    """
    size = source.seek(0, io.SEEK_END)
    source.seek(0)
    try:
        with soundfile.SoundFile(source) as f:
            check_header(f, name, limits)
            check_wav_length(f, size, name)
            rate, max_frames = f.samplerate, math.floor(limits.max_audio_s * f.samplerate)
            out = BlockResampler(rate, -(-min(f.frames, max_frames) * SAMPLE_RATE // rate))
            seen = 0
            # One second a read (~6 MB at 192 kHz x 8 channels), at most one past the limit.
            while (
                x := f.read(min(rate, max_frames + 1 - seen), dtype="float32", always_2d=True)
            ).size:
                seen += x.shape[0]
                # soundfile reads a seekable file no further than its header's length: this is
                # the backstop for a reader that would (no unbounded growth in any case).
                if seen > max_frames:
                    raise AudioRefused(
                        "too_long",
                        _limit(
                            f"{name} (its header says less)",
                            f"longer than {limits.max_audio_s:g} s",
                            "max_audio_s",
                            f"{limits.max_audio_s:g}",
                        ),
                    )
                if not np.isfinite(x).all():  # NaN or inf: float WAVs can hold them
                    raise AudioRefused(
                        "corrupt",
                        f"{name} holds NaN or infinite samples (a float file with broken "
                        "values): re-export it, or replace them with silence",
                    )
                out.feed(x.mean(axis=1, dtype=np.float32))  # (frames, channels) -> mono
    except (soundfile.LibsndfileError, RuntimeError) as err:
        raise AudioRefused("unreadable", f"{name}: {err}") from None
    if seen == 0:
        raise AudioRefused("empty", f"{name} holds no audio samples")
    return out.finish()
