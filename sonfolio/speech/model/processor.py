"""What turns audio and text into model inputs and labels: a tokenizer + a feature extractor.

Two ways, both saved into one folder that `AutoTokenizer.from_pretrained(folder)` and
`AutoFeatureExtractor.from_pretrained(folder)` load (and `WhisperProcessor.from_pretrained`
for a base model's, whose tokenizer is a Whisper one):
- a base model (hub id or local folder): its processor taken as it is, so fine-tuning keeps
  the vocabulary its weights were trained with;
- from scratch: a byte-level BPE trained on the train transcripts (sonfolio.tokenizer) and a
  WhisperFeatureExtractor built here, with a window (`chunk_length_s`) sized for short clips.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from transformers import AutoProcessor, WhisperFeatureExtractor

from sonfolio.speech.common.audio import SAMPLE_RATE
from sonfolio.tokenizer import BuiltTokenizer, train_bpe

if TYPE_CHECKING:
    from sonfolio.config.tokenizer import SpeechTokenizer

log = logging.getLogger(__name__)

HOP_LENGTH = 160  # samples: 10 ms frames at 16 kHz, as Whisper
N_FFT = 400  # samples: 25 ms windows, as Whisper


class BaseModelUnavailable(RuntimeError):
    """speech_tokenizer.base_model could not be loaded; the message says what to configure."""


class ClipTooLong(ValueError):
    """A clip is longer than the feature extractor's window."""


def build_feature_extractor(cfg: SpeechTokenizer) -> WhisperFeatureExtractor:
    """Log-mel features as Whisper's, over a `chunk_length_s` window: (num_mel_bins, 100/s)."""
    return WhisperFeatureExtractor(
        feature_size=cfg.num_mel_bins,
        sampling_rate=SAMPLE_RATE,
        hop_length=HOP_LENGTH,
        chunk_length=cfg.chunk_length_s,
        n_fft=N_FFT,
    )


def load_base(name: str, language: str | None = None) -> Any:
    """The base model's processor (tokenizer + feature extractor), as it is; `name` is a hub
    name, an HF folder, a CTranslate2 folder or `package:<name>` (sonfolio.speech.model.bases).

    Raises:
        BaseModelUnavailable: not found, not reachable, damaged, or not a speech model's
            processor.
    """
    from sonfolio.speech.model.bases import BaseModelError, resolve

    try:
        processor = AutoProcessor.from_pretrained(resolve(name, language))
    except BaseModelError as err:
        raise BaseModelUnavailable(f"speech_tokenizer.base_model = {name!r}: {err}") from err
    except (OSError, ValueError) as err:  # not found, offline, no config to tell the class
        raise BaseModelUnavailable(
            f"speech_tokenizer.base_model = {name!r} could not be loaded: {err}\n"
            "Set it to a local folder holding the model's tokenizer and "
            "preprocessor_config.json (e.g. `hf download NAME --local-dir DIR`), or run where "
            "the hub is reachable (unset HF_HUB_OFFLINE; check the network, HF_ENDPOINT or "
            "HF_TOKEN); null trains a tokenizer here instead."
        ) from err
    if not (hasattr(processor, "tokenizer") and hasattr(processor, "feature_extractor")):
        raise BaseModelUnavailable(
            f"speech_tokenizer.base_model = {name!r} gave a {type(processor).__name__}, not a "
            "processor with a tokenizer and a feature extractor: point it at a Whisper model"
        )
    fe = processor.feature_extractor
    if getattr(fe, "sampling_rate", SAMPLE_RATE) != SAMPLE_RATE:
        raise BaseModelUnavailable(
            f"speech_tokenizer.base_model = {name!r} expects {fe.sampling_rate} Hz audio; the "
            f"speech data is {SAMPLE_RATE} Hz"
        )
    return processor


def set_prompt(tok: Any, cfg: SpeechTokenizer) -> None:
    """Labels start with Whisper's prompt for `cfg.language` (`<|fr|><|transcribe|>
    <|notimestamps|>`) when the base's tokenizer is Whisper's own; a tokenizer without
    Whisper's special tokens is taken as it is (logged).

    Raises:
        BaseModelUnavailable: a Whisper tokenizer that has no token for `cfg.language`.
    """
    vocab = tok.get_vocab()
    if not cfg.language or "<|startoftranscript|>" not in vocab:
        if cfg.language:
            log.info(
                "speech_tokenizer.language = %s not used: %s's tokenizer has no Whisper prompt "
                "tokens",
                cfg.language,
                cfg.base_model,
            )
        return
    if f"<|{cfg.language}|>" not in vocab:
        raise BaseModelUnavailable(
            f"speech_tokenizer.language = {cfg.language!r}: {cfg.base_model}'s tokenizer has no "
            f"<|{cfg.language}|> token; use a language code it knows (e.g. fr), or null"
        )
    tok.set_prefix_tokens(language=cfg.language, task="transcribe", predict_timestamps=False)


def check_window(rows: list[dict[str, Any]], chunk_length_s: float) -> None:
    """Fail if a clip is longer than the window (the model would see it cut).

    Raises:
        ClipTooLong: naming the longest clip and the keys that set both lengths.
    """
    longest = max(rows, key=lambda r: r["duration"])
    if longest["duration"] > chunk_length_s:
        raise ClipTooLong(
            f"{longest['audio']} lasts {longest['duration']} s, longer than the model's input "
            f"window of {chunk_length_s} s: lower speech_data.max_duration_s, or raise "
            "speech_tokenizer.chunk_length_s (up to a base model's own window, 30 s for Whisper)"
        )


def build_processor(
    cfg: SpeechTokenizer, train: list[str], rows: list[dict[str, Any]]
) -> BuiltTokenizer:
    """The base model's processor as it is (round-trip failures only logged), or a BPE trained
    on the `train` transcripts and a feature extractor built from `cfg` (failures fatal).

    Raises:
        BaseModelUnavailable: the base model cannot be loaded. ClipTooLong: a clip of `rows`
        (the manifest) is longer than the feature extractor's window.
    """
    if cfg.base_model:
        processor = load_base(cfg.base_model, cfg.language)
        tok, features = processor.tokenizer, processor.feature_extractor
        set_prompt(tok, cfg)
        if cfg.chunk_length_s < features.chunk_length:  # a shorter window for short clips
            log.info(
                "base window %d s cut to speech_tokenizer.chunk_length_s = %d s",
                features.chunk_length,
                cfg.chunk_length_s,
            )
            features = WhisperFeatureExtractor(
                **{**features.to_dict(), "chunk_length": cfg.chunk_length_s}
            )
        parts = (type(processor)(feature_extractor=features, tokenizer=tok),)
    else:
        tok = train_bpe(train, cfg.vocab_size, cfg.min_frequency, cfg.model_max_length)
        features = build_feature_extractor(cfg)
        parts = (tok, features)
    check_window(rows, features.chunk_length)
    stats = {
        "base_model": cfg.base_model,
        "vocab_size": len(tok),
        "chunk_length_s": features.chunk_length,
        "num_mel_bins": features.feature_size,
    }
    return BuiltTokenizer(tok, parts, exact=not cfg.base_model, stats=stats)
