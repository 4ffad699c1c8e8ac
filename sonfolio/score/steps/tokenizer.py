"""tokenizer@score: a BPE over canonical LilyPond (sonfolio.faces.TokenizerFace)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sonfolio.config.tokenizer import ScoreTokenizer
    from sonfolio.tokenizer import BuiltTokenizer


class ScoreTokenizerFace:
    name = "score"
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


FACE = ScoreTokenizerFace()
