"""The speech track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("speech"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations


class SpeechTrack:
    """The speech track."""

    name = "speech"

    # --- data ---

    # --- tokenizer ---

    # --- train ---

    # --- qat ---

    # --- export ---

    # --- bench ---

    # --- eval ---

    # Compared with the reference variant (delta_<key>; a positive wer delta is a loss) and
    # written to quality.csv, with eval_csv_extra, for `dvc plots`.
    eval_delta_keys = ("wer", "cer")
    eval_csv_extra = "clips_per_s"
    # How the report shows a variant's samples (sonfolio.report.SAMPLE_VIEWS): the worst clips
    # the eval names in its metrics, with their audio.
    eval_samples = "clips"

    def eval_tool(self, params):
        """None: WER and CER are computed in-process, with no outside tool."""
        return None

    def eval_inputs(self, variant, rows, data):
        """(B, mel bins, frames) log-mel features of `rows`' clips under `data`, for `variant`."""
        from sonfolio.speech.evaluate import inputs

        return inputs(variant, rows, data)

    def eval_scorer(self, cfg, data, tool, work):
        """Scores each variant's transcripts (WER and CER after normalisation, per split and
        voice) and writes the worst clips with their audio paths; no tool, no scratch folder."""
        from sonfolio.speech.evaluate import Scorer

        return Scorer(cfg, data)


TRACK = SpeechTrack()
