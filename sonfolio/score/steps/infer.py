"""Reading with an exported score model, under the canonical grammar (sonfolio.faces.InferFace)."""

from __future__ import annotations

from typing import Any


class ScoreInferFace:
    name = "score"
    command = "read"  # `sonfolio read`, POST /read
    model_flag = "--score-model"

    def check_infer(self, processor: Any, cfg: Any) -> None:
        """Inference settings (params.yaml `infer`) that cannot work with this model: none, a
        page is cut into systems whatever the model's canvas."""

    def grammar(self) -> Any:
        """The module that decodes under the canonical grammar, so every output is valid
        canonical LilyPond (sonfolio.score.decode.grammar; read by sonfolio.variants)."""
        from sonfolio.score.decode import grammar

        return grammar


FACE = ScoreInferFace()
