"""The score track as the training engine sees it: model, datasets of every split, tokenizer
and image processor, and the held-out token error rate the train step reports.

`FACE.training(params)` (sonfolio/score/steps/train.py) gives it to train@score, qat@score,
`sonfolio estimate` and doctor, so that each reads the data exactly as training does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelerate.utils import set_seed
from transformers import AutoTokenizer, VisionEncoderDecoderModel

from sonfolio.evaluation import examples, most_common, token_error_rate
from sonfolio.score.model.batches import ScoreSystems, collate, image_processor, jitter
from sonfolio.score.model.model import attention_kernels, build, check_size, encoder_positions
from sonfolio.train import ctc
from sonfolio.train.device import Backend
from sonfolio.train.setup import Reading, Setup, Training, read_splits

if TYPE_CHECKING:
    from sonfolio.config.train import ScoreTrain

EVAL_SPLITS = ("heldout", "test")  # decoded after training: whole unseen collections, and test


@dataclass(frozen=True)
class ScoreTraining(Training):
    """score_train, and the width the systems are rendered at: the model's input width."""

    track = "score"
    eval_splits = EVAL_SPLITS
    cfg: ScoreTrain
    width: int  # px: score_data.image_long_side

    @property
    def hub_model(self) -> str | None:
        return self.cfg.model.pretrained

    def check_size(self, backend: Backend) -> None:
        check_size("score_train", self.cfg.model.size, backend)

    def key(self) -> dict[str, Any]:
        return {"cfg": self.cfg.model_dump(), "width": self.width}

    def attention_kernels(self, model: VisionEncoderDecoderModel) -> str:
        return attention_kernels(model)

    def build_model(self, tokenizer_dir: Path) -> VisionEncoderDecoderModel:
        return build(self.cfg.model, AutoTokenizer.from_pretrained(str(tokenizer_dir)), self.width)

    def reading(
        self, data: Path, tokenizer_dir: Path, model: VisionEncoderDecoderModel | None
    ) -> tuple[VisionEncoderDecoderModel, Reading]:
        """The model (seeded, marked to decode as `cfg.decode` says; or `model`, e.g. a
        QAT-prepared one) and how it reads `data`'s systems: the tokenizer and image processor."""
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        set_seed(self.cfg.seed)
        if model is None:
            model = build(self.cfg.model, tok, self.width)
            ctc.set_decoding(model, self.cfg.decode)
        shape = tuple(model.config.encoder.image_size)
        max_tokens = getattr(model.config.decoder, "n_positions", None) or 10**9
        start = model.config.decoder_start_token_id
        height, width = shape
        images = image_processor(height, width)
        reading = Reading(
            lambda rows: ScoreSystems(rows, data, tok, start, shape, max_tokens),
            collate,
            model.encoder,
            encoder_positions(model.config.encoder),
            f"{height}x{width}",
            [tok, images],
            jitter(self.cfg.jitter),
        )
        return model, reading

    def evaluate(self, model: VisionEncoderDecoderModel, setup: Setup) -> dict[str, Any]:
        """How the model reads (decode), and per held-out split the TER of greedy decoding
        (by the CTC head or the decoder, as the model's config says) and of a constant guess
        (the commonest train system) for scale: a model that ignored the image could do about
        that well."""
        metrics: dict[str, Any] = {"decode": self.cfg.decode}
        constant = most_common([r["text"] for r in setup.sets["train"].rows])
        generate = ctc.generate_fn(model) if ctc.decodes_with_ctc(model.config) else None
        max_new = self.cfg.decode_max_tokens
        for split, dataset, rows, hyps in read_splits(
            model, setup, EVAL_SPLITS, "pixel_values", max_new, generate
        ):
            refs = [r["text"] for r in rows]
            guess = [constant] * len(refs)
            by: dict[str, tuple[list[str], list[str]]] = {}
            for row, ref, hyp in zip(rows, refs, hyps, strict=True):
                pair = by.setdefault(row.get("collection") or "?", ([], []))
                pair[0].append(ref)
                pair[1].append(hyp)
            metrics |= {
                f"{split}_ter": round(token_error_rate(refs, hyps), 4),
                # a split mixes collections of very unequal difficulty (dense quartet parts,
                # synthetic systems, chorales): each on its own, with its system count
                f"{split}_ter_by_collection": {
                    c: {"ter": round(token_error_rate(*by[c]), 4), "systems": len(by[c][0])}
                    for c in sorted(by)
                },
                f"{split}_ter_constant_guess": round(token_error_rate(refs, guess), 4),
                f"{split}_systems": len(dataset),
                f"{split}_examples": examples(refs, hyps),
            }
        return metrics
