"""report: how the page shows the speech track (sonfolio.faces.ReportFace)."""

from __future__ import annotations

from sonfolio.speech.steps.keys import EVAL_DELTA_KEYS, GATE_METRIC


class SpeechReportFace:
    name = "speech"
    # The eval's keys per split in the report's quality table (sonfolio.report.quality); the
    # first is the headline, plotted per variant and shown for QAT vs PTQ.
    report_quality = ("wer", "cer", "delta_wer", "delta_cer", "clips_per_s", "real_time_factor")
    report_quality_label = "word error rate (WER, lower is better)"  # the headline's axis label
    gate_metric = GATE_METRIC  # the bench's quality key per variant
    eval_delta_keys = EVAL_DELTA_KEYS
    # How the report shows a variant's samples (sonfolio.report.samples.VIEWS): the worst clips
    # the eval names in its metrics, with their audio.
    eval_samples = "clips"


FACE = SpeechReportFace()
