"""Whisper's log-mel features, computed as transformers' `WhisperFeatureExtractor` computes them.

Imports numpy and the standard library only: the inference path (`sonfolio transcribe`, the
service) must not load torch or transformers, which cost about 300 MB of resident memory for
one feature extractor. That is why this is our own: the same arithmetic as
`WhisperFeatureExtractor._np_extract_fbank_features` (transformers 4.57), vectorised over the
batch, and read from the same `preprocessor_config.json` the training path saves.

What a clip goes through, as transformers' defaults (`padding="max_length"`, `truncation=True`):
zero-padded (`padding_value`) on the right or cut to `n_samples`; reflect-padded by `n_fft // 2`
at both ends (`center=True`); framed every `hop_length` samples; a periodic Hann window; the
power spectrum (|rfft|^2); the slaney mel filter bank (0-8000 Hz); log10 with a floor at 1e-10;
the last frame dropped; every value raised to at least the clip's maximum minus 8 (80 dB of
range); then (x + 4) / 4.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

CONFIG_FILE = "preprocessor_config.json"
EXTRACTOR_TYPE = "WhisperFeatureExtractor"
# Keys read from the config; every one must be present (transformers would fill in a default
# for a missing one, which may not be what the model was trained with).
INT_KEYS = (
    "feature_size",
    "sampling_rate",
    "hop_length",
    "n_fft",
    "chunk_length",
    "n_samples",
    "nb_max_frames",
)
FLOAT_KEYS = ("padding_value", "dither")
MEL_MAX_HZ = 8000.0  # WhisperFeatureExtractor.__init__ fixes the bank to 0-8000 Hz
LOG_FLOOR = 1e-10  # power floor before log10 (transformers' mel_floor)
DYNAMIC_RANGE = 8.0  # log10 units kept below each clip's maximum (80 dB)


class LogMel:
    """Whisper's log-mel feature extractor, numpy only; called like `WhisperFeatureExtractor`.

    Attributes carry the names (and values) of WhisperFeatureExtractor's, so code that reads
    `n_samples`, `sampling_rate` or `mel_filters` from either works with both.
    """

    def __init__(
        self,
        feature_size: int,
        sampling_rate: int,
        hop_length: int,
        n_fft: int,
        chunk_length: int,
        padding_value: float = 0.0,
    ) -> None:
        self.feature_size = feature_size
        self.sampling_rate = sampling_rate
        self.hop_length = hop_length
        self.n_fft = n_fft
        self.chunk_length = chunk_length
        self.padding_value = padding_value
        # Derived as WhisperFeatureExtractor.__init__ derives them (it ignores the config's).
        self.n_samples = chunk_length * sampling_rate
        self.nb_max_frames = self.n_samples // hop_length
        self.mel_filters = mel_filter_bank(feature_size, n_fft, sampling_rate)  # (n_fft//2+1, M)
        self.window = np.hanning(n_fft + 1)[:-1]  # periodic Hann, float64, as window_function

    @classmethod
    def from_folder(cls, folder: Path) -> LogMel:
        """The extractor saved in `folder/preprocessor_config.json` (a model or export folder).

        Raises:
            ValueError: the file is missing, is not JSON, or holds a config `from_config`
                rejects; the message names the file.
        """
        path = Path(folder) / CONFIG_FILE
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise ValueError(
                f"{path} not found: point at the model folder that holds the feature "
                "extractor's config (the training and export stages write it)"
            ) from err
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}): re-export the model") from err
        return cls.from_config(config, source=str(path))

    @classmethod
    def from_config(cls, d: dict[str, Any], source: str = "config") -> LogMel:
        """The extractor a `preprocessor_config.json` dict describes; other keys are ignored.

        Raises:
            ValueError: a key is missing or of the wrong type, a size is not positive, the
                derived sizes disagree, the extractor is not Whisper's, padding is on the left,
                or dither is not 0 (random noise would make the features differ run to run).
        """
        kind = d.get("feature_extractor_type", EXTRACTOR_TYPE)
        if kind != EXTRACTOR_TYPE:
            raise ValueError(
                f"{source}: feature_extractor_type = {kind!r}; only {EXTRACTOR_TYPE} is "
                "computed here: use a Whisper model's preprocessor_config.json"
            )
        missing = [k for k in (*INT_KEYS, *FLOAT_KEYS) if k not in d]
        if missing:
            raise ValueError(
                f"{source}: missing key(s) {', '.join(missing)}: re-save the feature extractor "
                "with transformers (WhisperFeatureExtractor.save_pretrained writes them all)"
            )
        for key in INT_KEYS:
            value = d[key]
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{source}: {key} = {value!r} must be a positive integer")
        for key in FLOAT_KEYS:
            if not isinstance(d[key], int | float) or isinstance(d[key], bool):
                raise ValueError(f"{source}: {key} = {d[key]!r} must be a number")
        if d["dither"] != 0:
            raise ValueError(
                f"{source}: dither = {d['dither']!r}; only 0.0 is supported (dither adds random "
                "noise, used in training only): set dither to 0.0 in the file"
            )
        if d.get("padding_side", "right") != "right":
            raise ValueError(
                f"{source}: padding_side = {d['padding_side']!r}; Whisper pads on the right: "
                'set padding_side to "right"'
            )
        _check_derived(d, source)
        return cls(
            feature_size=d["feature_size"],
            sampling_rate=d["sampling_rate"],
            hop_length=d["hop_length"],
            n_fft=d["n_fft"],
            chunk_length=d["chunk_length"],
            padding_value=float(d["padding_value"]),
        )

    def __call__(
        self,
        raw_speech: np.ndarray | Sequence[np.ndarray],
        sampling_rate: int | None = None,
        return_tensors: str | None = "np",
    ) -> dict[str, np.ndarray]:
        """Log-mel features of one clip or a batch of clips (mono float, `sampling_rate` Hz).

        Returns:
            {"input_features": float32 (B, feature_size, nb_max_frames)}; B is 1 for one clip.

        Raises:
            ValueError: a sampling rate other than the config's, `return_tensors` other than
                None or "np", an empty batch, or a clip that is not 1-D.
        """
        if return_tensors not in (None, "np"):
            raise ValueError(
                f"return_tensors = {return_tensors!r}: LogMel returns numpy arrays only "
                '(pass "np" or None; convert to a tensor where torch is loaded anyway)'
            )
        if sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise ValueError(
                f"The audio is at {sampling_rate} Hz; this model's features are computed at "
                f"{self.sampling_rate} Hz: resample the audio first "
                "(sonfolio.speech.common.audio.resample)"
            )
        return {"input_features": self.log_mel(self.pad(as_clips(raw_speech)))}

    def pad(self, clips: list[np.ndarray]) -> np.ndarray:
        """float32 (B, n_samples): each clip cut to, or right-padded with `padding_value` to,
        `n_samples` (transformers' padding="max_length", truncation=True)."""
        out = np.full((len(clips), self.n_samples), self.padding_value, dtype=np.float32)
        for row, clip in zip(out, clips, strict=True):
            kept = clip[: self.n_samples]
            row[: kept.size] = kept
        return out

    def log_mel(self, batch: np.ndarray) -> np.ndarray:
        """float32 (B, n_samples) -> float32 (B, feature_size, nb_max_frames) features."""
        half = self.n_fft // 2
        # float64 from here, as transformers' spectrogram(): its FFT runs in float64.
        padded = np.pad(batch.astype(np.float64), ((0, 0), (half, half)), mode="reflect")
        # (B, F, n_fft) view, no copy; frame f starts at sample f * hop_length. transformers
        # drops the last frame after computing it; we never compute it (same features).
        frames = sliding_window_view(padded, self.n_fft, axis=-1)[:, :: self.hop_length][:, :-1]
        # The windowed frames (B, F, n_fft) and the spectrum are the two large temporaries, each
        # B * F * n_fft * 8 bytes, dropped once used: the peak is 107 MB for 16 clips in an 8 s
        # window and 400 MB in a 30 s one (tracemalloc); slice larger batches if that matters.
        spectrum = np.fft.rfft(frames * self.window, axis=-1)  # (B, F, n_fft//2+1) complex128
        power = np.square(spectrum.real)
        power += np.square(spectrum.imag)
        del spectrum
        mel = power @ self.mel_filters  # (B, F, M)
        log_spec = np.log10(np.maximum(mel, LOG_FLOOR))
        peak = log_spec.max(axis=(1, 2), keepdims=True)  # per clip, (B, 1, 1)
        log_spec = np.maximum(log_spec, peak - DYNAMIC_RANGE)
        return ((log_spec + 4.0) / 4.0).transpose(0, 2, 1).astype(np.float32)  # (B, M, F)


def as_clips(raw_speech: np.ndarray | Sequence[Any]) -> list[np.ndarray]:
    """One clip or a batch of clips as a list of 1-D float32 arrays.

    As transformers: a 2-D array or a list whose first item is an array or a list is a batch;
    anything else (a 1-D array, a list of numbers) is one clip. Values are cast to float32
    before anything else, as transformers casts them, so float64 input gives its features.

    Raises:
        ValueError: an empty batch, or a clip with more than one dimension (stereo).
    """
    if isinstance(raw_speech, np.ndarray):
        if raw_speech.ndim > 2:
            raise ValueError(f"audio of shape {raw_speech.shape}: pass (samples,) or (B, samples)")
        items = list(raw_speech) if raw_speech.ndim == 2 else [raw_speech]
    elif isinstance(raw_speech, list | tuple):
        if not raw_speech:
            raise ValueError("an empty batch of clips: pass at least one clip")
        batched = isinstance(raw_speech[0], np.ndarray | list | tuple)
        items = list(raw_speech) if batched else [raw_speech]
    else:
        raise ValueError(f"audio of type {type(raw_speech).__name__}: pass a numpy array")
    clips = [np.asarray(item, dtype=np.float32) for item in items]
    for i, clip in enumerate(clips):
        if clip.ndim != 1:
            raise ValueError(
                f"clip {i} has shape {clip.shape}: pass mono audio, one 1-D array a clip "
                "(mix stereo down to one channel first)"
            )
    return clips


def mel_filter_bank(n_mels: int, n_fft: int, sampling_rate: int) -> np.ndarray:
    """float64 (n_fft // 2 + 1, n_mels) slaney-scale, slaney-normalised triangles over
    0-8000 Hz: transformers' `mel_filter_bank` as WhisperFeatureExtractor.__init__ calls it."""
    mel_edges = np.linspace(_hz_to_mel(0.0), _hz_to_mel(MEL_MAX_HZ), n_mels + 2)
    edges_hz = _mel_to_hz(mel_edges)  # (M + 2,) left edge, centre, right edge of each
    # FFT bin frequencies; sampling_rate // 2 (integer) as transformers writes it
    bins_hz = np.linspace(0, sampling_rate // 2, n_fft // 2 + 1)
    widths = np.diff(edges_hz)  # (M + 1,)
    slopes = edges_hz[None, :] - bins_hz[:, None]  # (bins, M + 2)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    triangles = np.maximum(0.0, np.minimum(down, up))  # (bins, M)
    # Slaney normalisation: each filter's area is the same, so a band's energy does not grow
    # with its width in Hz.
    return triangles * (2.0 / (edges_hz[2:] - edges_hz[:-2]))[None, :]


# The slaney mel scale (librosa's default, htk=False): linear below 1 kHz (3 mels per 200 Hz),
# logarithmic above (27 mels per factor 6.4). Written with transformers' own expressions, so
# that the filters are equal to the last bit, not only to rounding.
_LOG_START_HZ = 1000.0
_LOG_START_MEL = 15.0


def _hz_to_mel(hz: float) -> float:
    if hz < _LOG_START_HZ:
        return 3.0 * hz / 200.0
    return _LOG_START_MEL + math.log(hz / _LOG_START_HZ) * (27.0 / math.log(6.4))


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    linear = 200.0 * mels / 3.0
    log = _LOG_START_HZ * np.exp(math.log(6.4) / 27.0 * (mels - _LOG_START_MEL))
    return np.where(mels >= _LOG_START_MEL, log, linear)


def _check_derived(d: dict[str, Any], source: str) -> None:
    """n_samples and nb_max_frames must be what transformers derives from the other keys: it
    recomputes them and ignores the file's, so a mismatch means the file is not what the
    model was trained with."""
    n_samples = d["chunk_length"] * d["sampling_rate"]
    if d["n_samples"] != n_samples:
        raise ValueError(
            f"{source}: n_samples = {d['n_samples']} but chunk_length * sampling_rate = "
            f"{n_samples}: fix the file (transformers uses {n_samples})"
        )
    if d["nb_max_frames"] != n_samples // d["hop_length"]:
        raise ValueError(
            f"{source}: nb_max_frames = {d['nb_max_frames']} but n_samples // hop_length = "
            f"{n_samples // d['hop_length']}: fix the file"
        )
    if d["n_fft"] // 2 >= n_samples:
        raise ValueError(
            f"{source}: n_fft = {d['n_fft']} is longer than twice the window of {n_samples} "
            "samples: reflect padding needs n_fft // 2 < n_samples"
        )
