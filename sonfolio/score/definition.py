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


TRACK = ScoreTrack()
