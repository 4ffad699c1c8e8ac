"""report: how the page shows the score track (sonfolio.faces.ReportFace)."""

from __future__ import annotations

from sonfolio.score.steps.keys import EVAL_DELTA_KEYS, GATE_METRIC


class ScoreReportFace:
    name = "score"
    # The eval's keys per split in the report's quality table (sonfolio.report.quality); the
    # first is the headline, plotted per variant and shown for QAT vs PTQ. SER: the symbol
    # error rate of the eval (token edit distance over the canonical text); the bench's and
    # training's `ter` is the same measure on the tokenizer's tokens.
    report_quality = (
        "ser",
        "cer",
        "note_error_rate",
        "exact_match",
        "compile_rate",
        "clean_compile_rate",
        "delta_ser",
    )
    report_quality_label = "symbol error rate (SER, lower is better)"  # the headline's axis label
    gate_metric = GATE_METRIC  # the bench's quality key per variant (TER)
    eval_delta_keys = EVAL_DELTA_KEYS
    # How the report shows a variant's samples (sonfolio.report.samples.VIEWS): the side-by-side
    # images the eval writes.
    eval_samples = "images"


FACE = ScoreReportFace()
