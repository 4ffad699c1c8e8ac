"""Transcribing with an exported Whisper, greedily (sonfolio.faces.InferFace)."""

from __future__ import annotations

from typing import Any


class SpeechInferFace:
    name = "speech"
    command = "transcribe"  # `sonfolio transcribe`, POST /transcribe
    model_flag = "--speech-model"

    def check_infer(self, processor: Any, cfg: Any) -> None:
        """Inference settings (params.yaml `infer`) that cannot work with this model.

        Raises:
            ValueError: infer.speech.audio's cuts do not fit the model's window.
        """
        from sonfolio.speech.decode.chunks import check_settings, processor_window_s

        check_settings(processor_window_s(processor), cfg.speech.audio)

    def grammar(self) -> None:
        """None: transcripts are decoded greedily, with no grammar."""
        return None


FACE = SpeechInferFace()
