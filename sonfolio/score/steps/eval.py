"""eval@score: every variant's systems scored, and whole pages read (sonfolio.faces.EvalFace)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sonfolio.score.steps.keys import EVAL_DELTA_KEYS


class ScoreEvalFace:
    name = "score"
    eval_delta_keys = EVAL_DELTA_KEYS  # compared with the reference variant; quality.csv
    eval_csv_extra = "clean_compile_rate"

    def decode_options(self, cfg: Any) -> dict[str, Any]:
        """score_eval.constrained: decode under the canonical grammar (every text valid)."""
        return {"constrained": cfg.constrained}

    def search_workers(self, cfg: Any) -> int:
        """score_eval.search_workers: processes the constrained CTC searches of a batch are
        spread over (0: one per core)."""
        return cfg.search_workers

    def decode_workers(self, cfg: Any) -> int:
        """One batch at a time: under the grammar a batch's searches are what costs, and they
        spread over processes instead (search_workers)."""
        return 1

    def eval_baselines(self, cfg: Any, model: Path, work: Path) -> list[Any]:
        """Models scored beside the variants: none."""
        return []

    def eval_tool(self, params: Any) -> Path:
        """The LilyPond binary (a Path) every prediction is compiled with: score_data.lilypond,
        the one the data stage renders with."""
        from sonfolio.score.common.lilypond import find_lilypond

        return find_lilypond(params.score_data.lilypond)

    def eval_extra(self, params: Any, paths: Any) -> Callable[[Path], dict[str, Any]] | None:
        """Whole pages read end to end (score_eval.pages): parts the data stage cut from pages,
        engraved again whole in LilyPond's default layout and read as `read --page` reads
        them, by score_eval.pages.variant; None when pages.parts is 0 or the variant is
        absent (the figures would not be the read command's)."""
        cfg = params.score_eval.pages
        folder = paths.export / cfg.variant
        if not cfg.parts or not folder.is_dir():
            return None

        def pages(work: Path) -> dict[str, Any]:
            from sonfolio import variants
            from sonfolio.io import read_jsonl
            from sonfolio.score.common.lilypond import find_lilypond
            from sonfolio.score.eval.page_eval import evaluate_pages, heldout_parts

            rows = read_jsonl(paths.data / "manifest.jsonl")
            parts = heldout_parts(rows, cfg.split, cfg.parts, params.score_eval.seed)
            variant = variants.load(folder, threads=params.score_eval.threads)
            exe = find_lilypond(params.score_data.lilypond)
            figures = evaluate_pages(
                variant,
                parts,
                params.infer,
                exe,
                cfg.dpi,
                work,
                tuple(cfg.engravings),
                params.score_data.scan,
                paths.eval / "samples" / "pages",  # the first page of each engraving, kept
            )
            return {"pages": {"variant": cfg.variant, "split": cfg.split, **figures}}

        return pages

    def eval_inputs(self, variant: Any, rows: list[dict], data: Path) -> Any:
        """(B, 1, H, W) pixels of `rows`' images under `data`, ink = 1, for `variant`."""
        from sonfolio.score.eval.evaluate import inputs

        return inputs(variant, rows, data)

    def eval_scorer(self, cfg: Any, data: Path, tool: Any, work: Path) -> Any:
        """Scores each variant's systems (SER, CER, errors by kind, compile rate) and writes
        side-by-side images (input, prediction render, truth render); `tool` is eval_tool's
        LilyPond, `work` a scratch folder for renders."""
        from sonfolio.score.eval.evaluate import Scorer

        return Scorer(cfg, data, tool, work)


FACE = ScoreEvalFace()
