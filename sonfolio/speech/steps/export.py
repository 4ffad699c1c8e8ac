"""export@speech, and every runtime that loads a Whisper folder back
(sonfolio.faces.ExportFace): optimum's task, the classes, the model card."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class SpeechExportFace:
    name = "speech"
    export_task = "automatic-speech-recognition-with-past"  # optimum-onnx's, with past keys/values
    input_name = "input_features"  # (B, mel bins, frames) log-mel features

    def register_classes(self, onnx: bool = False) -> None:
        """Nothing to register: Whisper is transformers' and optimum's own."""

    def processor(self, folder: Path) -> Any:
        """Whisper's log-mel features in numpy (sonfolio.speech.common.logmel.LogMel)."""
        from sonfolio.speech.common.logmel import LogMel

        return LogMel.from_folder(folder)

    def torch_model_class(self) -> type:
        """The transformers class of a saved PyTorch folder (FP32 or QAT-trained)."""
        from transformers import WhisperForConditionalGeneration

        return WhisperForConditionalGeneration

    def ort_model_class(self) -> type:
        """optimum's class that loads an exported variant folder as is."""
        from optimum.onnxruntime import ORTModelForSpeechSeq2Seq

        return ORTModelForSpeechSeq2Seq

    def processor_class(self) -> type:
        """The preprocessor saved beside the model: audio to log-mel features."""
        from transformers import WhisperFeatureExtractor

        return WhisperFeatureExtractor

    def ort_encoder_inputs(self, x: Any) -> dict[str, Any]:
        """Keyword arguments of optimum's encoder run alone on a batch `x` (optimum's Whisper
        encoder takes an attention mask; the window is fixed, so there is none)."""
        return {"input_features": x, "attention_mask": None}

    # the model card of every variant folder (sonfolio.modelcard)
    pipeline_tag = "automatic-speech-recognition"
    card_title = "Sonfolio French speech recognition (Whisper architecture)"
    card_summary = (
        "A Whisper for French speech (fine-tuned from a pretrained base, by default OpenAI "
        "whisper-base, or trained from scratch), exported to ONNX with its KV cache (merged "
        "decoder)."
    )
    card_data = (
        "French sentences spoken by espeak-ng voices (synthetic), or the hub corpus set in "
        "params.yaml speech_data.hub (docs/speech.md)"
    )


FACE = SpeechExportFace()
