"""Tiny models for the evaluation tests: saved as the training stages save them, and exported
with optimum-onnx as the export stages do (tokenizer and processor copied beside the ONNX files).
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import torch
from infer_tiny import TINY_SPEECH, tiny_score  # tests/ is on sys.path

from sonfolio.config.params import Params
from sonfolio.score.model.batches import image_processor
from sonfolio.score.model.model import build as build_score
from sonfolio.speech.model.model import build as build_speech
from sonfolio.speech.model.processor import build_feature_extractor
from sonfolio.tokenizer import train_bpe

SHAPE = (32, 128)  # (height, width) px
TEXTS = [r"\clef treble \key g \major \time 4/4 g'4 a'4 b'4 c''4 | d''2 b'2", "c'4 d'4 e'2"]
WINDOW_S = 2


def _train(model, inputs: dict, labels: list[list[int]], steps: int) -> None:
    """A few AdamW steps on one batch: enough to move the model off its random outputs."""
    longest = max(map(len, labels))
    y = torch.full((len(labels), longest), -100, dtype=torch.long)
    for row, ids in enumerate(labels):
        y[row, : len(ids)] = torch.tensor(ids)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        model(**inputs, labels=y).loss.backward()
        opt.step()
    model.eval()


def save_score(
    folder: Path,
    texts: list[str] = TEXTS,
    pixels: torch.Tensor | None = None,
    steps: int = 0,
    max_length: int = 64,
) -> Path:
    """A tiny VisionEncoderDecoder for SHAPE images, trained `steps` steps on (pixels, texts)
    when pixels are given ((B, 1, H, W), ink = 1), saved as score_train saves it."""
    from sonfolio.train.samples import label_ids

    torch.manual_seed(0)
    tok = train_bpe(texts * 4, 300, 1, max_length)
    model = build_score(tiny_score(SHAPE[0]), tok, SHAPE[1])
    if pixels is not None:
        labels = label_ids(tok, texts, model.config.decoder_start_token_id)
        _train(model, {"pixel_values": pixels}, labels, steps)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    image_processor(*SHAPE).save_pretrained(str(folder))
    return folder


def save_speech(
    folder: Path,
    params: Params,
    window_s: int = WINDOW_S,
    texts: list[str] | None = None,
    audio: list | None = None,
    steps: int = 0,
    corpus: list[str] | None = None,
) -> Path:
    """A tiny Whisper with a `window_s` window, its BPE trained on `corpus` (default: texts),
    trained `steps` steps on (audio, texts) when audio is given (16 kHz float arrays), saved
    as speech_train saves it."""
    from sonfolio.train.samples import label_ids

    torch.manual_seed(0)
    texts = texts or ["il fait beau à Paris", "bonjour"]
    tok = train_bpe((corpus or texts) * 4, 300, 1, 64)
    feats = build_feature_extractor(
        params.speech_tokenizer.model_copy(update={"chunk_length_s": window_s, "base_model": None})
    )
    model = build_speech(
        TINY_SPEECH,
        tok,
        feats,
    )
    if audio is not None:
        x = feats(audio, sampling_rate=16000, return_tensors="pt")["input_features"]
        labels = label_ids(tok, texts, model.config.decoder_start_token_id)
        _train(model, {"input_features": x}, labels, steps)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    feats.save_pretrained(str(folder))
    return folder


def export(src: Path, dest: Path, task: str, **shapes: int) -> Path:
    """optimum-onnx's export with the KV cache, plus the tokenizer and processor beside it."""
    from optimum.exporters.onnx import main_export

    main_export(str(src), str(dest), task=task, **shapes)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, dest / name)
    shutil.copy(src / "preprocessor_config.json", dest / "preprocessor_config.json")
    return dest


def quality_csv(out: Path) -> list[dict[str, str]]:
    """The rows of the eval's quality.csv under `out` (the `dvc plots` data), in file order."""
    with (out / "quality.csv").open() as f:
        return list(csv.DictReader(f))
