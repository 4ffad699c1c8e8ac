"""The speech track as the training engine sees it: model, datasets of every split, tokenizer
and feature extractor, and the held-out CER and WER the train step reports.

`FACE.training(params)` (sonfolio/speech/steps/train.py) gives it to train@speech,
qat@speech, `sonfolio estimate` and doctor, so that each reads the data exactly as training
does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelerate.utils import set_seed
from transformers import AutoFeatureExtractor, AutoTokenizer, WhisperForConditionalGeneration

from sonfolio.evaluation import char_error_rate, examples, most_common, word_error_rate
from sonfolio.speech.common.normalize import normalize
from sonfolio.speech.model.batches import SpeechClips, collate
from sonfolio.speech.model.model import attention_kernels, build, check_size, freeze
from sonfolio.train.device import Backend
from sonfolio.train.setup import Reading, Setup, Training, read_splits

if TYPE_CHECKING:
    from sonfolio.config.train import SpeechTrain

EVAL_SPLITS = ("test",)  # decoded after training: unseen sentences and voices


@dataclass(frozen=True)
class SpeechTraining(Training):
    """speech_train: Whisper trained from a size preset, or fine-tuned from a base model."""

    track = "speech"
    eval_splits = EVAL_SPLITS
    cfg: SpeechTrain

    @property
    def hub_model(self) -> str | None:
        return self.cfg.model.base_model

    def check_size(self, backend: Backend) -> None:
        check_size("speech_train", self.cfg.model, backend)

    def key(self) -> dict[str, Any]:
        return {"cfg": self.cfg.model_dump()}

    def attention_kernels(self, model: WhisperForConditionalGeneration) -> str:
        return attention_kernels(model)

    def build_model(self, tokenizer_dir: Path) -> WhisperForConditionalGeneration:
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        return build(self.cfg.model, tok, AutoFeatureExtractor.from_pretrained(tokenizer_dir))

    def reading(
        self, data: Path, tokenizer_dir: Path, model: WhisperForConditionalGeneration | None
    ) -> tuple[WhisperForConditionalGeneration, Reading]:
        """The model (seeded; or `model`, e.g. a QAT-prepared one) and how it reads `data`'s
        clips: the tokenizer and feature extractor."""
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        features = AutoFeatureExtractor.from_pretrained(str(tokenizer_dir))
        set_seed(self.cfg.seed)
        if model is None:
            model = build(self.cfg.model, tok, features)
        elif self.cfg.model.base_model:  # QAT trains what fine-tuning trained, no more
            freeze(model, self.cfg.model)
        start = model.config.decoder_start_token_id
        max_tokens = model.config.max_target_positions
        reading = Reading(
            lambda rows: SpeechClips(rows, data, features, tok, start, max_tokens),
            collate,
            model.model.encoder,
            model.config.max_source_positions,
            f"{features.feature_size}x{features.chunk_length}s",
            [tok, features],
        )
        return model, reading

    def evaluate(self, model: WhisperForConditionalGeneration, setup: Setup) -> dict[str, Any]:
        """Per held-out split, CER and WER of greedy decoding on normalised text
        (sonfolio.speech.common.normalize), and the CER of a constant guess (the commonest train
        transcript) for scale."""
        metrics: dict[str, Any] = {}
        constant = most_common([r["text_norm"] for r in setup.sets["train"].rows])
        kwargs = {"language": self.cfg.model.language} if self.cfg.model.language else {}
        # the start token counts against the decoder's positions
        max_new = min(self.cfg.decode_max_tokens, model.config.max_target_positions - 1)

        def generate(x: Any, **kw: Any) -> Any:
            return model.generate(x, **kw, **kwargs)

        for split, dataset, rows, hyps in read_splits(
            model, setup, EVAL_SPLITS, "input_features", max_new, generate
        ):
            refs = [r["text_norm"] for r in rows]
            norm = [normalize(h) for h in hyps]
            guess = [constant] * len(refs)
            metrics |= {
                f"{split}_cer": round(char_error_rate(refs, norm), 4),
                f"{split}_cer_constant_guess": round(char_error_rate(refs, guess), 4),
                f"{split}_wer": round(word_error_rate(refs, norm), 4),
                f"{split}_clips": len(dataset),
                f"{split}_examples": examples([r["text"] for r in rows], hyps),
            }
        return metrics
