"""The score track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("score"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from sonfolio.config import ScoreData, ScoreTokenizer
    from sonfolio.tokenizer import BuiltTokenizer


class ScoreTrack:
    """The score track."""

    name = "score"

    # --- data ---

    data_file = "image"  # the manifest column naming each row's file (the step hashes it)
    data_items = "systems"  # what a manifest row is, in the metrics' `systems_per_s`

    def build_data(
        self, cfg: ScoreData, download_cache: Path, out: Path
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The score dataset rendered into `out`: its manifest rows and its stats.

        Real and synthetic music, one image per staff system; rows (image, text, piece,
        collection, split) as sonfolio.score.dataset.build makes them. Archive sources are
        fetched into `download_cache`.
        """
        from sonfolio.score.dataset import build

        return build(cfg, download_cache, out)

    # --- tokenizer ---

    text_columns = ("text",)  # the manifest's texts, each checked to survive a round trip

    def build_tokenizer(
        self, cfg: ScoreTokenizer, train: list[str], rows: list[dict[str, Any]]
    ) -> BuiltTokenizer:
        """A BPE over canonical LilyPond, trained on the `train` texts.

        Exact: a text it does not give back is an error (the model could never write it).
        """
        from sonfolio.tokenizer import BuiltTokenizer, train_bpe

        tok = train_bpe(train, cfg.vocab_size, cfg.min_frequency, cfg.model_max_length)
        return BuiltTokenizer(tok, (tok,), exact=True, stats={"vocab_size": tok.vocab_size})

    # --- train ---

    # --- qat ---

    # --- export ---

    # --- bench ---

    # --- eval ---

    # Compared with the reference variant (delta_<key>; a positive ser delta is a loss) and
    # written to quality.csv, with eval_csv_extra, for `dvc plots`.
    eval_delta_keys = ("ser", "cer", "exact_match", "compile_rate")
    eval_csv_extra = "clean_compile_rate"
    # How the report shows a variant's samples (sonfolio.report.SAMPLE_VIEWS): the side-by-side
    # images the eval writes.
    eval_samples = "images"

    def eval_tool(self, params):
        """The LilyPond binary (a Path) every prediction is compiled with: score_data.lilypond,
        the one the data stage renders with."""
        from sonfolio.score.lilypond import find_lilypond

        return find_lilypond(params.score_data.lilypond)

    def eval_inputs(self, variant, rows, data):
        """(B, 1, H, W) pixels of `rows`' images under `data`, ink = 1, for `variant`."""
        from sonfolio.score.evaluate import inputs

        return inputs(variant, rows, data)

    def eval_scorer(self, cfg, data, tool, work):
        """Scores each variant's systems (SER, CER, errors by kind, compile rate) and writes
        side-by-side images (input, prediction render, truth render); `tool` is eval_tool's
        LilyPond, `work` a scratch folder for renders."""
        from sonfolio.score.evaluate import Scorer

        return Scorer(cfg, data, tool, work)


TRACK = ScoreTrack()
