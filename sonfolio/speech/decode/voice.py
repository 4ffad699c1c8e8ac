"""Is anyone speaking in a clip? So that silence and noise give an empty, flagged text.

Whisper trained on subtitles writes a sentence for any sound at all ("Merci d'avoir regardé",
or a repeat of the prompt) when there is no speech. Two checks, cheapest first:

- an energy floor: a chunk whose loudest 25 ms frame is below `floor_dbfs` is silence;
- a voice activity detector, Silero VAD: the ONNX model faster-whisper ships (a pinned
  dependency already, used for the speech bench), run offline on onnxruntime by
  sonfolio.speech.decode.silero, which finds the segments faster-whisper's VAD finds without
  importing faster-whisper (PyAV, CTranslate2 and the rest: a cold start's cost). A chunk in
  which it finds less than `min_speech_s` of speech holds none. Noise of any colour (white,
  pink, brown), hum and music score low; espeak-ng's voices and real speech score high.

Whisper's own no-speech probability is not used: the variants' `generate` (the ONNX loop, the
CTranslate2 peer) return texts, not the first position's logits, and the VAD decides before any
decoding is spent. The check runs in `transcribe` and the service only, never in the eval stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonfolio.speech.common.audio import SAMPLE_RATE
from sonfolio.speech.decode.chunks import frame_db
from sonfolio.speech.decode.silero import speech_segments

if TYPE_CHECKING:
    from sonfolio.config.infer import NoSpeech


def speech_s(clip: np.ndarray, cfg: NoSpeech) -> float:
    """Seconds of speech Silero VAD finds in a 16 kHz mono float clip (0 when it is all below
    the energy floor).

    Raises:
        SileroMissing: faster-whisper (whose copy of the model is run) is not installed.
    """
    if clip.size == 0 or float(frame_db(clip, SAMPLE_RATE).max()) < cfg.floor_dbfs:
        return 0.0
    # No padding and 100 ms of silence to close a segment: count the speech windows themselves,
    # not the segments' padded extent (faster-whisper's defaults are tuned for cutting: 400 ms
    # of padding each side, and segments closed only after 2 s of silence).
    segments = speech_segments(clip, cfg.vad_threshold, min_silence_ms=100)
    return sum(end - start for start, end in segments) / SAMPLE_RATE


def has_speech(clip: np.ndarray, cfg: NoSpeech) -> bool:
    """Whether a 16 kHz mono float clip holds at least `cfg.min_speech_s` of speech."""
    return speech_s(clip, cfg) >= cfg.min_speech_s
