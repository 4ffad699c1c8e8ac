"""The speech track's tokenizer stage: a BPE + feature extractor from scratch, or a base model's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from transformers import (
    AutoFeatureExtractor,
    AutoTokenizer,
    WhisperFeatureExtractor,
    WhisperProcessor,
    WhisperTokenizerFast,
)

from sonfolio import tracks
from sonfolio.config.params import Params
from sonfolio.config.tokenizer import SpeechTokenizer
from sonfolio.io import read_jsonl
from sonfolio.speech.common.audio import SAMPLE_RATE, from_pcm16, read_wav
from sonfolio.speech.model.processor import (
    BaseModelUnavailable,
    ClipTooLong,
    build_feature_extractor,
)
from sonfolio.tokenizer import train_bpe
from tasks import tokenizer as tokenizer_step
from tasks.tokenizer import RoundTripError, run

SPEECH = tracks.face("speech", "tokenizer")


@pytest.fixture(scope="module")
def built(speech_dataset: Path, scratch: Params, tmp_path_factory) -> tuple[Path, dict]:
    """The from-scratch preset's tokenizer stage: a BPE and a feature extractor built here."""
    out = tmp_path_factory.mktemp("speech_tok")
    stats = run(
        scratch.speech_tokenizer,
        SPEECH,
        speech_dataset / "manifest.jsonl",
        out / "tok",
        out / "stats.json",
    )
    return out / "tok", stats


def test_from_scratch_round_trips_every_transcript(built, speech_dataset: Path) -> None:
    folder, stats = built
    rows = read_jsonl(speech_dataset / "manifest.jsonl")
    tok = AutoTokenizer.from_pretrained(folder)
    for text in [r["text"] for r in rows] + [r["text_norm"] for r in rows]:
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert stats["round_trip_checked"] == 2 * len(rows) and stats["round_trip_failures"] == 0
    assert stats["train_texts"] == sum(r["split"] == "train" for r in rows)


def test_feature_extractor_window_fits_the_clips(built, speech_dataset: Path, params) -> None:
    folder, stats = built
    features = AutoFeatureExtractor.from_pretrained(folder)
    cfg = params.speech_tokenizer
    assert (features.sampling_rate, features.feature_size) == (SAMPLE_RATE, cfg.num_mel_bins)
    assert features.chunk_length == cfg.chunk_length_s == stats["chunk_length_s"]
    row = read_jsonl(speech_dataset / "manifest.jsonl")[0]
    pcm, _ = read_wav(speech_dataset / row["audio"])
    x = features(from_pcm16(pcm), sampling_rate=SAMPLE_RATE, return_tensors="np")
    # (batch, mel bins, frames): 100 frames per second over the window
    assert x["input_features"].shape == (1, cfg.num_mel_bins, cfg.chunk_length_s * 100)


def test_clip_longer_than_the_window_fails(speech_dataset: Path, params, tmp_path) -> None:
    cfg = params.speech_tokenizer.model_copy(update={"chunk_length_s": 1})
    with pytest.raises(ClipTooLong, match=r"speech_tokenizer\.chunk_length_s"):
        run(cfg, SPEECH, speech_dataset / "manifest.jsonl", tmp_path / "tok", tmp_path / "s.json")
    assert list(tmp_path.iterdir()) == []


def test_round_trip_failure_fails_and_saves_nothing(
    speech_dataset: Path, scratch, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(tokenizer_step, "round_trip_failures", lambda tok, texts: texts[:1])
    with pytest.raises(RoundTripError):
        run(
            scratch.speech_tokenizer,
            SPEECH,
            speech_dataset / "manifest.jsonl",
            tmp_path / "tok",
            tmp_path / "s.json",
        )
    assert list(tmp_path.iterdir()) == []


def whisper_base(folder: Path, texts: list[str], cfg: SpeechTokenizer) -> Path:
    """A stand-in for a downloaded Whisper model folder: a WhisperProcessor (Whisper tokenizer
    + feature extractor) saved as `hf download openai/whisper-...` would leave it."""
    bpe = train_bpe(texts, 400, 1, 448)
    tok = WhisperTokenizerFast(
        tokenizer_object=bpe.backend_tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    features = build_feature_extractor(
        cfg.model_copy(update={"num_mel_bins": 128, "chunk_length_s": 30})
    )
    WhisperProcessor(feature_extractor=features, tokenizer=tok).save_pretrained(str(folder))
    return folder


def test_base_model_processor_is_taken_as_it_is(speech_dataset: Path, params, tmp_path) -> None:
    texts = [r["text"] for r in read_jsonl(speech_dataset / "manifest.jsonl")]
    base = whisper_base(tmp_path / "base", texts[:20], params.speech_tokenizer)
    cfg = params.speech_tokenizer.model_copy(update={"base_model": str(base)})
    stats = run(
        cfg, SPEECH, speech_dataset / "manifest.jsonl", tmp_path / "tok", tmp_path / "s.json"
    )
    saved = WhisperProcessor.from_pretrained(tmp_path / "tok")
    original = WhisperProcessor.from_pretrained(base)
    assert saved.tokenizer.get_vocab() == original.tokenizer.get_vocab()
    assert stats["vocab_size"] == len(original.tokenizer)  # not speech_tokenizer.vocab_size
    # the base's 30-s window cut to speech_tokenizer.chunk_length_s (short clips)
    assert (saved.feature_extractor.feature_size, saved.feature_extractor.chunk_length) == (
        128,
        cfg.chunk_length_s,
    )
    assert json.loads((tmp_path / "s.json").read_text())["base_model"] == str(base)
    sample = texts[-1]
    assert (
        saved.tokenizer.decode(saved.tokenizer(sample)["input_ids"], skip_special_tokens=True)
        == sample
    )


def test_unreachable_base_model_says_what_to_configure(
    speech_dataset: Path, params, tmp_path
) -> None:
    cfg = params.speech_tokenizer.model_copy(update={"base_model": "nobody/no-such-whisper"})
    with pytest.raises(BaseModelUnavailable) as err:
        run(cfg, SPEECH, speech_dataset / "manifest.jsonl", tmp_path / "tok", tmp_path / "s.json")
    message = str(err.value)
    assert "speech_tokenizer.base_model = 'nobody/no-such-whisper'" in message
    assert "local folder" in message and "HF_HUB_OFFLINE" in message
    assert list(tmp_path.iterdir()) == []


def test_feature_extractor_matches_whisper_defaults_at_30_s(params: Params) -> None:
    """Built with chunk_length 30 and 80 bins, it equals Whisper's own feature extractor."""
    cfg = params.speech_tokenizer.model_copy(update={"num_mel_bins": 80, "chunk_length_s": 30})
    ours, theirs = build_feature_extractor(cfg), WhisperFeatureExtractor()
    x = np.random.default_rng(0).standard_normal(SAMPLE_RATE).astype(np.float32) * 0.1
    a = ours(x, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
    b = theirs(x, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
    assert np.array_equal(a, b)


def test_a_language_the_base_does_not_know_is_named(speech_dataset: Path, params, tmp_path):
    cfg = params.speech_tokenizer.model_copy(update={"language": "xx"})
    assert cfg.base_model == "package:whisper-base"
    with pytest.raises(BaseModelUnavailable, match=r"whisper-base.*no <\|xx\|> token"):
        run(cfg, SPEECH, speech_dataset / "manifest.jsonl", tmp_path / "tok", tmp_path / "s.json")
    assert list(tmp_path.iterdir()) == []


def test_labels_start_with_whisper_s_french_prompt(speech_dataset: Path, params, tmp_path):
    """The default: whisper-base's own tokenizer, labels prefixed <|fr|><|transcribe|>
    <|notimestamps|> (after the decoder start token), and its window cut to 8 s."""
    run(
        params.speech_tokenizer,
        SPEECH,
        speech_dataset / "manifest.jsonl",
        tmp_path / "tok",
        tmp_path / "s.json",
    )
    saved = WhisperProcessor.from_pretrained(tmp_path / "tok")
    ids = saved.tokenizer("Bonjour.")["input_ids"]
    names = saved.tokenizer.convert_ids_to_tokens(ids)
    assert names[:4] == ["<|startoftranscript|>", "<|fr|>", "<|transcribe|>", "<|notimestamps|>"]
    assert names[-1] == "<|endoftext|>" and ids[1] == 50265  # <|fr|> in Whisper's vocabulary
    assert saved.feature_extractor.chunk_length == params.speech_tokenizer.chunk_length_s
