"""Silero VAD without `import faster_whisper`: its ONNX model on onnxruntime, and the speech
segments faster-whisper's `get_speech_timestamps` finds (the options voice.py uses).

Why our own: `faster_whisper.vad` runs the package's __init__, which imports PyAV, CTranslate2,
huggingface_hub, tokenizers and tqdm. Measured on one `speech_s` call on a 5 s clip in a fresh
process (2 busy cores, 5 runs): through faster_whisper.vad 0.20-0.24 s and +63 MB RSS (107 MB
peak); here 0.08-0.12 s and +35 MB (80 MB peak), of which onnxruntime's import, which the ORT
variants pay anyway, is 19 MB (with it loaded first: 0.05 s and +16 MB, against 0.19-0.22 s and
+44 MB). `sonfolio transcribe` and the service start cold, so that cost is paid on every run.

It follows faster-whisper 1.2.1's vad.py (`SileroVADModel.__call__`, `get_speech_timestamps`,
`get_vad_model`) step for step where it matters to the result: the same model file (the one
faster-whisper ships, found without importing it), the same session options, the same windows
and batches, the same state machine; tests/speech/test_silero.py checks the sample indices
against faster-whisper's on real speech, noise and silence. Only the options voice.py needs are
kept: no padding, no minimum speech length, no maximum segment length (faster-whisper's
defaults for those three: 400 ms, 0 ms, unbounded).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnxruntime

SAMPLE_RATE = 16_000  # the only rate the model (and faster-whisper's VAD) takes
WINDOW = 512  # samples per probability: 32 ms
CONTEXT = 64  # samples of the previous window fed in front of each one
BATCH = 10_000  # windows per session.run, the LSTM state carried across (faster-whisper's)
MODEL_FILE = "silero_vad_v6.onnx"


class SileroMissing(RuntimeError):
    """faster-whisper, whose copy of the Silero model we run, is not installed."""


def model_path() -> Path:
    """The Silero ONNX file inside the installed faster-whisper package.

    `find_spec` on a top-level package locates it without running its __init__ (which is what
    costs: PyAV, CTranslate2 and the rest).

    Raises:
        SileroMissing: faster-whisper is not installed, or its copy has no model file.
    """
    fix = "pip install faster-whisper, or set infer.speech.no_speech.check: false in params.yaml"
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise SileroMissing(f"voice detection needs the faster-whisper package (its model): {fix}")
    path = Path(spec.submodule_search_locations[0]) / "assets" / MODEL_FILE
    if not path.is_file():
        raise SileroMissing(f"faster-whisper has no {path}: reinstall it ({fix})")
    return path


@functools.cache
def session() -> onnxruntime.InferenceSession:
    """One session per process, with faster-whisper's options (one thread, no memory arena)."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 4
    return onnxruntime.InferenceSession(
        str(model_path()), providers=["CPUExecutionProvider"], sess_options=opts
    )


def speech_probs(audio: np.ndarray) -> np.ndarray:
    """(n,) float32 at 16 kHz -> (n // 512 + 1,) speech probability per 32 ms window."""
    # Always padded, by a whole window of zeros when 512 divides n: as faster-whisper does.
    audio = np.asarray(audio, np.float32)
    windows = np.pad(audio, (0, WINDOW - audio.size % WINDOW)).reshape(-1, WINDOW)
    # faster-whisper zeroes the last window's last 64 samples (a write through a view meant for
    # the context); done here too, since real samples lie there when n % 512 > 448.
    windows[-1, -CONTEXT:] = 0
    context = np.concatenate([np.zeros((1, CONTEXT), np.float32), windows[:-1, -CONTEXT:]])
    batch = np.concatenate([context, windows], axis=1)  # (windows, 576)
    h = c = np.zeros((1, 1, 128), np.float32)
    probs = []
    for i in range(0, len(batch), BATCH):
        out, h, c = session().run(None, {"input": batch[i : i + BATCH], "h": h, "c": c})
        probs.append(out)
    return np.concatenate(probs).reshape(-1)


def speech_segments(
    audio: np.ndarray, threshold: float, min_silence_ms: int
) -> list[tuple[int, int]]:
    """[start, end) sample indices of the speech in a 16 kHz mono float32 clip: what
    faster-whisper's `get_speech_timestamps` returns for VadOptions(threshold=threshold,
    min_silence_duration_ms=min_silence_ms, speech_pad_ms=0), the others at their defaults.

    A segment opens at a window whose probability reaches `threshold` and closes where the
    probability first fell below `threshold - 0.15` (floor 0.01), once it has stayed there (never
    back to `threshold`) for `min_silence_ms`; one still open at the end runs to the clip's end.
    """
    probs = speech_probs(audio)
    # Compared in float32, as faster-whisper's numpy scalars are (NEP 50): float32(0.35) is
    # not below 0.35 there, though it is in float64.
    speech = (probs >= np.float32(threshold)).tolist()
    silent = (probs < np.float32(max(threshold - 0.15, 0.01))).tolist()
    min_silence = SAMPLE_RATE * min_silence_ms / 1000
    segments = []
    start = silent_from = 0  # silent_from: where the current silence began (0: none)
    triggered = False
    for i, (is_speech, is_silent) in enumerate(zip(speech, silent, strict=True)):
        at = WINDOW * i
        if is_speech:
            silent_from = 0
            if not triggered:
                triggered, start = True, at
            continue
        if triggered and is_silent:
            silent_from = silent_from or at
            if at - silent_from >= min_silence:
                segments.append((start, silent_from))
                triggered, silent_from = False, 0
    # faster-whisper keeps segments strictly longer than min_speech_duration_ms (0): this drops
    # only one opened in the all-padding last window.
    if triggered and audio.size - start > 0:
        segments.append((start, audio.size))
    return segments
