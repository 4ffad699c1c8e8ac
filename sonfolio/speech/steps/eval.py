"""eval@speech: every variant's transcripts scored, beside the base (sonfolio.faces.EvalFace)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sonfolio.speech.steps.keys import EVAL_DELTA_KEYS


class SpeechEvalFace:
    name = "speech"
    eval_delta_keys = EVAL_DELTA_KEYS  # compared with the reference variant; quality.csv
    eval_csv_extra = "clips_per_s"

    def decode_options(self, cfg: Any) -> dict[str, Any]:
        """Greedy decoding only: no grammar."""
        return {}

    def search_workers(self, cfg: Any) -> int:
        """One process: greedy decoding has no search to spread."""
        return 1

    def decode_workers(self, cfg: Any) -> int:
        """speech_eval.decode_workers: batches decoded side by side, a thread each."""
        return cfg.decode_workers

    def eval_baselines(self, cfg: Any, model: Path, work: Path) -> list[Any]:
        """Models scored beside the variants: the untouched base (speech_eval.zero_shot_base)
        with the fine-tuned model's window and prompt, as `base_zero_shot` under `work`."""
        from sonfolio.speech.eval.evaluate import zero_shot_base

        if not cfg.zero_shot_base:
            return []
        return [zero_shot_base(cfg.zero_shot_base, model, work / "base_zero_shot")]

    def eval_tool(self, params: Any) -> None:
        """None: WER and CER are computed in-process, with no outside tool."""
        return None

    def eval_extra(self, params: Any, paths: Any) -> Callable[[Path], dict[str, Any]]:
        """The real voice (data@speech's real/ set) read whole by every variant and the base,
        gated against the base (speech_eval.real): `real` in the metrics, or why it is absent
        (the data stage's stats say)."""
        from sonfolio.speech.eval.real import real_voice

        stats = params.paths.metrics / f"{self.name}_data.json"
        return partial(real_voice, params.speech_eval, params.infer, paths, stats)

    def eval_inputs(self, variant: Any, rows: list[dict], data: Path) -> Any:
        """(B, mel bins, frames) log-mel features of `rows`' clips under `data`, for `variant`."""
        from sonfolio.speech.eval.evaluate import inputs

        return inputs(variant, rows, data)

    def eval_scorer(self, cfg: Any, data: Path, tool: Any, work: Path) -> Any:
        """Scores each variant's transcripts (WER and CER after normalisation, per split and
        voice) and writes the worst clips with their audio paths; no tool, no scratch folder."""
        from sonfolio.speech.eval.evaluate import Scorer

        return Scorer(cfg, data)


FACE = SpeechEvalFace()
