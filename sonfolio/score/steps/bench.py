"""bench@score: the speed bench's inputs, quality and gate (sonfolio.faces.BenchFace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sonfolio.score.steps.keys import GATE_METRIC


class ScoreBenchFace:
    name = "score"
    gate_metric = GATE_METRIC  # the quality key the bench's gate reads (lower is better)

    def bench_inputs(self, folder: Path, data: Path, rows: list[dict]) -> tuple[Any, list[str]]:
        """The rows' system images as (N, 1, H, W) float32 pixels at the canvas of the model
        in `folder`, and their reference texts."""
        import json

        import numpy as np

        from sonfolio.score.model.batches import load_image, to_pixel_values

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
        """Other engines measured beside the variants (sonfolio.bench.peer.peer_case), and those
        left out with why: none reads scores."""
        return [], {}

    def bench_peer_base(self, gate: Any) -> None:
        """The untouched base a peer runs as is: none."""
        return None


FACE = ScoreBenchFace()
