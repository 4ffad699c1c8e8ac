"""The score track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("score"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ScoreTrack:
    """The score track."""

    name = "score"

    # --- data ---

    # --- tokenizer ---

    # --- train ---

    # --- qat ---

    # --- export ---

    # A saved model of this track as every runtime loads it: the export (sonfolio.export), a
    # variant folder (sonfolio.variants, for eval and inference) and the bench's workers.
    export_task = "image-to-text-with-past"  # optimum-onnx's task, with past key/values
    input_name = "pixel_values"  # (B, 1, H, W) float pixels in [0, 1], ink = 1

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

    def check_infer(self, processor: Any, cfg: Any) -> None:
        """Inference settings (params.yaml `infer`) that cannot work with this model: none, a
        page is cut into systems whatever the model's canvas."""

    # the model card of every variant folder (sonfolio.modelcard)
    pipeline_tag = "image-to-text"
    card_title = "Sonfolio score reader: staff system image to LilyPond"
    card_summary = (
        "A ViT encoder and a GPT-2 decoder that write one staff system as canonical "
        "LilyPond text, exported to ONNX with its KV cache (merged decoder)."
    )
    card_data = (
        "rendered staff systems of music21 corpus pieces (essenFolksong, bach) plus "
        "synthetic systems, canonical LilyPond text (docs/canonical-lilypond.md)"
    )

    # --- bench ---

    gate_metric = "ter"  # the quality key the bench's gate reads (lower is better)

    def bench_inputs(self, folder: Path, data: Path, rows: list[dict]) -> tuple[Any, list[str]]:
        """The rows' system images as (N, 1, H, W) float32 pixels at the canvas of the model
        in `folder`, and their reference texts."""
        import json

        import numpy as np

        from sonfolio.score.batches import load_image, to_pixel_values

        shape = json.loads((folder / "config.json").read_text())["encoder"]["image_size"]
        images = np.stack([load_image(data / r["image"], *shape) for r in rows])
        return to_pixel_values(images).numpy(), [r["text"] for r in rows]

    def quality(self, refs: list[str], texts: list[str]) -> dict[str, float]:
        """Decoded texts against the references: the symbol error rate (TER), lower is better."""
        from sonfolio.evaluation import token_error_rate

        return {"ter": round(token_error_rate(refs, texts), 4)}

    def max_increase(self, gate: Any) -> float:
        """The gate's allowance (score_bench): TER a variant may lose vs torch FP32."""
        return gate.max_ter_increase

    def quality_tokens(self, model: Path, decode_max_tokens: int) -> int:
        """The greedy quality decode's limit: score_train.decode_max_tokens as it is."""
        return decode_max_tokens

    def bench_peers(self, gate: Any) -> tuple[list[str], dict[str, str]]:
        """Other engines measured beside the variants (sonfolio.bench.peer_case), and those
        left out with why: none reads scores."""
        return [], {}

    # --- eval ---


TRACK = ScoreTrack()
