"""Is anyone speaking in a clip? So that silence and noise give an empty, flagged text.

Whisper trained on subtitles writes a sentence for any sound at all ("Merci d'avoir regardé",
or a repeat of the prompt) when there is no speech. Two checks, cheapest first:

- an energy floor: a chunk whose loudest 25 ms frame is below `floor_dbfs` is silence;
- a voice activity detector, Silero VAD, in the copy faster-whisper ships with its ONNX model
  (a pinned dependency already, used for the speech bench; it runs offline on onnxruntime):
  a chunk in which it finds less than `min_speech_s` of speech holds none. Noise of any colour
  (white, pink, brown), hum and music score low; espeak-ng's voices and real speech score high.

Whisper's own no-speech probability is not used: the variants' `generate` (the ONNX loop, the
CTranslate2 peer) return texts, not the first position's logits, and the VAD decides before any
decoding is spent. The check runs in `transcribe` and the service only, never in the eval stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonfolio.speech.common.audio import SAMPLE_RATE
from sonfolio.speech.decode.chunks import frame_db

if TYPE_CHECKING:
    from sonfolio.config.infer import NoSpeech


def speech_s(clip: np.ndarray, cfg: NoSpeech) -> float:
    """Seconds of speech Silero VAD finds in a 16 kHz mono float clip (0 when it is all below
    the energy floor)."""
    if clip.size == 0 or float(frame_db(clip, SAMPLE_RATE).max()) < cfg.floor_dbfs:
        return 0.0
    from faster_whisper.vad import VadOptions, get_speech_timestamps  # ~0.2 s import: lazily

    # No padding, no minimum silence: count the speech frames themselves, not the segments'
    # padded extent (the defaults are tuned for cutting, and pad each segment by 400 ms).
    options = VadOptions(threshold=cfg.vad_threshold, speech_pad_ms=0, min_silence_duration_ms=100)
    stamps = get_speech_timestamps(clip.astype(np.float32, copy=False), options, SAMPLE_RATE)
    return sum(s["end"] - s["start"] for s in stamps) / SAMPLE_RATE


def has_speech(clip: np.ndarray, cfg: NoSpeech) -> bool:
    """Whether a 16 kHz mono float clip holds at least `cfg.min_speech_s` of speech."""
    return speech_s(clip, cfg) >= cfg.min_speech_s
