"""The score track as the training engine sees it: model, datasets of every split, tokenizer
and image processor, and the held-out token error rate the train step reports.

`TRACK.training(params)` (sonfolio/score/definition.py) gives it to train@score, qat@score,
`sonfolio estimate` and doctor, so that each reads the data exactly as training does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate.utils import set_seed
from transformers import AutoTokenizer, VisionEncoderDecoderModel, ViTImageProcessor

from sonfolio.config import ScoreTrain
from sonfolio.evaluation import examples, most_common, token_error_rate
from sonfolio.io import read_jsonl
from sonfolio.score.batches import ScoreSystems, collate
from sonfolio.score.model import attention_kernels, build, check_size
from sonfolio.train import ctc
from sonfolio.train.device import Backend
from sonfolio.train.setup import Setup, engine_track, read_split, split_sets

log = logging.getLogger(__name__)

EVAL_SPLITS = ("heldout", "test")  # decoded after training: whole unseen collections, and test


@dataclass(frozen=True)
class ScoreTraining:
    """score_train, and the width the systems are rendered at: the model's input width."""

    cfg: ScoreTrain
    width: int  # px: score_data.image_long_side

    @property
    def hub_model(self) -> str | None:
        return self.cfg.model.pretrained

    @property
    def model_size(self) -> str:
        return self.cfg.model.size

    def check_size(self, backend: Backend) -> None:
        check_size("score_train", self.cfg.model.size, backend)

    def key(self) -> dict[str, Any]:
        return {"cfg": self.cfg.model_dump(), "width": self.width}

    def build_model(self, tokenizer_dir: Path) -> VisionEncoderDecoderModel:
        return build(self.cfg.model, AutoTokenizer.from_pretrained(str(tokenizer_dir)), self.width)

    def attention_kernels(self, model: VisionEncoderDecoderModel) -> str:
        return attention_kernels(model)

    def setup(
        self,
        data: Path,
        tokenizer_dir: Path,
        model: VisionEncoderDecoderModel | None = None,
        name: str | None = None,
    ) -> Setup:
        """The model (seeded, marked to decode as `cfg.decode` says; or `model`, e.g. a
        QAT-prepared one), the datasets of every split, the tokenizer and image processor."""
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        rows = read_jsonl(data / "manifest.jsonl")
        set_seed(self.cfg.seed)
        if model is None:
            model = build(self.cfg.model, tok, self.width)
            ctc.set_decoding(model, self.cfg.decode)
        shape = tuple(model.config.encoder.image_size)
        max_tokens = getattr(model.config.decoder, "n_positions", None) or 10**9
        start = model.config.decoder_start_token_id
        sets = split_sets(
            rows,
            lambda split_rows: ScoreSystems(split_rows, data, tok, start, shape, max_tokens),
            EVAL_SPLITS,
            data / "manifest.jsonl",
            "data@score",
        )
        (height, width), (ph, pw) = shape, model.config.encoder.patch_size
        track = engine_track(
            model,
            sets,
            collate,
            model.encoder,
            (height // ph) * (width // pw),  # patches: the encoder's positions
            f"{height}x{width}",
            name or "score_train",
        )
        log.info(
            "score model: %.2f M parameters; attention: %s",
            model.num_parameters() / 1e6,
            attention_kernels(model),
        )
        # grey pixels in [0, 1], ink = 1, padded to (height, width): sonfolio.score.batches
        images = ViTImageProcessor(
            do_resize=False,
            do_rescale=False,
            do_normalize=False,
            size={"height": height, "width": width},
        )
        return Setup(track, sets, tok, [tok, images])

    def evaluate(self, model: VisionEncoderDecoderModel, setup: Setup) -> dict[str, Any]:
        """How the model reads (decode), and per held-out split the TER of greedy decoding
        (by the CTC head or the decoder, as the model's config says) and of a constant guess
        (the commonest train system) for scale: a model that ignored the image could do about
        that well."""
        metrics: dict[str, Any] = {"decode": self.cfg.decode}
        constant = most_common([r["text"] for r in setup.sets["train"].rows])
        generate = ctc.generate_fn(model) if ctc.decodes_with_ctc(model.config) else None
        for split in EVAL_SPLITS:
            dataset = setup.sets[split]
            if not len(dataset):
                continue
            rows, hyps = read_split(
                model, dataset, collate, setup, "pixel_values", self.cfg.decode_max_tokens, generate
            )
            refs = [r["text"] for r in rows]
            guess = [constant] * len(refs)
            metrics |= {
                f"{split}_ter": round(token_error_rate(refs, hyps), 4),
                f"{split}_ter_constant_guess": round(token_error_rate(refs, guess), 4),
                f"{split}_systems": len(dataset),
                f"{split}_examples": examples(refs, hyps),
            }
        return metrics
