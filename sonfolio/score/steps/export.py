"""export@score, and every runtime that loads a score model folder back
(sonfolio.faces.ExportFace): optimum's task, the classes, the model card."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ScoreExportFace:
    name = "score"
    export_task = "image-to-text-with-past"  # optimum-onnx's task, with past key/values
    input_name = "pixel_values"  # (B, 1, H, W) float pixels in [0, 1], ink = 1

    def register_classes(self, onnx: bool = False) -> None:
        """Make the score model's own encoder (sonfolio.score.model.conv_encoder) known to
        transformers' Auto classes, and with `onnx` to optimum's exporter: before a saved
        folder is loaded or exported."""
        from sonfolio.score.model import conv_encoder

        if onnx:
            conv_encoder.register_onnx()

    def processor(self, folder: Path) -> Any:
        """The canvas a system image is fitted to (sonfolio.score.common.pixels.Canvas)."""
        from sonfolio.score.common.pixels import Canvas

        return Canvas.from_folder(folder)

    def torch_model_class(self) -> type:
        """The transformers class of a saved PyTorch folder (FP32 or QAT-trained)."""
        from transformers import VisionEncoderDecoderModel

        return VisionEncoderDecoderModel

    def ort_model_class(self) -> type:
        """optimum's class that loads an exported variant folder as is."""
        from optimum.onnxruntime import ORTModelForVision2Seq

        return ORTModelForVision2Seq

    def processor_class(self) -> type:
        """The preprocessor saved beside the model (its size is the image canvas)."""
        from transformers import ViTImageProcessor

        return ViTImageProcessor

    def ort_encoder_inputs(self, x: Any) -> dict[str, Any]:
        """Keyword arguments of optimum's encoder run alone on a batch `x`."""
        return {"pixel_values": x}

    # the model card of every variant folder (sonfolio.modelcard)
    pipeline_tag = "image-to-text"
    card_title = "Sonfolio score reader: staff system image to LilyPond"
    card_summary = (
        "A ViT or convolutional encoder with a CTC head and a GPT-2 decoder that write one "
        "staff system as canonical LilyPond text, exported to ONNX with its KV cache (merged "
        "decoder)."
    )
    card_data = (
        "staff systems of music21 corpus pieces (the collections of score_data.sources), "
        "engraved alone and cut from whole pages, plus synthetic systems; canonical LilyPond "
        "text with markings (docs/canonical-lilypond.md)"
    )


FACE = ScoreExportFace()
