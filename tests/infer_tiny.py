"""Tiny untrained models, real score images and real audio for the inference and service tests.

The models are built from the project's own builders (sonfolio.score.model.model,
sonfolio.speech.model.model)
at the smallest sizes and saved as the training stages save them (weights, tokenizer, image
processor / feature extractor), so `sonfolio.variants.load` reads them as it reads a trained
model. They are untrained: tests check what the code does with their output, never its quality.
Images are real LilyPond renders, prepared as score_data prepares them; audio is espeak-ng French.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
import yaml
from PIL import Image

from sonfolio.config.params import Params
from sonfolio.config.train import ScoreConv, ScoreModel, SpeechModel
from sonfolio.score.common.lilypond import compile_systems, find_lilypond
from sonfolio.score.model.batches import image_processor
from sonfolio.speech.common.audio import write_wav
from sonfolio.speech.data.espeak import synthesize
from sonfolio.speech.model.model import build as build_speech
from sonfolio.speech.model.processor import build_feature_extractor
from sonfolio.tokenizer import train_bpe

# the from-scratch tiny Whisper (no base: nothing frozen)
TINY_SPEECH = SpeechModel(
    base_model=None,
    size="tiny",
    language=None,
    frozen_encoder_layers=0,
    frozen_decoder_layers=0,
    decoder_trains="all",
)

ROOT = Path(__file__).resolve().parents[1]
SCORE_SHAPE = (32, 128)  # (height, width) px of the tiny score model's canvas
SPEECH_WINDOW_S = 2  # the tiny speech model's window, seconds

SYSTEMS = [  # canonical systems of about the same width, as on an engraved page
    r"\clef treble \key g \major \time 4/4 g'4 a'4 b'4 c''4 | d''2 b'2",
    r"\clef bass \key f \major \time 3/4 f4 g4 a4 | c'2. | bes4 a4 g4",
    r"\clef treble \key f \major \time 2/4 d''8 e''8 f''4 | a'4 d''4 | e''2",
]
SENTENCE = "Bonjour, il fait beau à Paris ce matin."


def tiny_score(height: int, encoder: str = "vit") -> ScoreModel:
    """score_train.model of the tiny size for `height`-px images: 32 x 8 ViT patches."""
    conv = ScoreConv(channels=[8, 16, 32], width_pools=2, layers=1)
    return ScoreModel(pretrained=None, size="tiny", encoder=encoder, image_height=height,
                      patch=(32, 8), conv=conv, dropout=None, attention_dropout=None)  # fmt: skip


def score_model(folder: Path) -> Path:
    """An untrained tiny VisionEncoderDecoder saved as score_train saves one."""
    from sonfolio.score.model.model import build

    torch.manual_seed(0)
    tok = train_bpe(SYSTEMS * 4, 300, 1, 64)
    model = build(tiny_score(SCORE_SHAPE[0]), tok, SCORE_SHAPE[1])
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    image_processor(*SCORE_SHAPE).save_pretrained(str(folder))
    return folder


def speech_model(folder: Path, params: Params) -> Path:
    """An untrained tiny Whisper with a 2 s window, saved as speech_train saves one."""
    torch.manual_seed(0)
    tok = train_bpe([SENTENCE, "il fait beau", "à Paris"] * 4, 300, 1, 64)
    features = build_feature_extractor(
        params.speech_tokenizer.model_copy(
            update={"chunk_length_s": SPEECH_WINDOW_S, "base_model": None}
        )
    )
    model = build_speech(
        TINY_SPEECH,
        tok,
        features,
    )
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    features.save_pretrained(str(folder))
    return folder


def pages_and_models(root: Path, params: Params) -> dict[str, Path]:
    """What the inference and service tests read, made under `root`: the first of SYSTEMS
    engraved (system.png), a page of all three (page.png), and the tiny score and speech
    models' folders."""
    systems = render_systems(SYSTEMS)
    systems[0].save(root / "system.png")
    stack(systems)[0].save(root / "page.png")
    return {
        "root": root,
        "system": root / "system.png",
        "page": root / "page.png",
        "score": score_model(root / "score"),
        "speech": speech_model(root / "speech", params),
    }


def render_systems(texts: list[str], long_side: int = 640) -> list[Image.Image]:
    """Real engravings, grey, long side resized as score_data does (render.finish_image)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = compile_systems(texts, Path(tmp), find_lilypond(), resolution=150)
        assert done.returncode == 0, done.log
        images = []
        for png in done.pngs:
            with Image.open(png) as raw:
                img = raw.convert("L")
            scale = long_side / max(img.size)
            size = (round(img.width * scale), round(img.height * scale))
            images.append(img.resize(size, Image.Resampling.LANCZOS))
    return images


def stack(images: list[Image.Image], gap: int = 24, margin: int = 30) -> tuple[Image.Image, list]:
    """A page: the images one under the other on white paper; and the rows each occupies."""
    width = max(i.width for i in images) + 2 * margin
    height = sum(i.height for i in images) + gap * (len(images) - 1) + 2 * margin
    page = Image.new("L", (width, height), 255)
    spans, top = [], margin
    for img in images:
        page.paste(img, (margin, top))
        spans.append((top, top + img.height))
        top += img.height + gap
    return page, spans


def speech_wav(path: Path, seconds: float | None = None) -> Path:
    """espeak-ng French at its own rate (22,050 Hz: the reader resamples). With `seconds`, the
    sentence repeats with 0.3 s pauses until the clip is that long."""
    pcm, rate = synthesize(SENTENCE, "m1", 170, 50)
    if seconds is not None:
        pause = np.zeros(int(0.3 * rate), dtype=np.int16)
        reps = int(np.ceil(seconds * rate / (pcm.size + pause.size)))
        pcm = np.concatenate([np.concatenate([pcm, pause])] * reps)[: int(seconds * rate)]
    write_wav(path, pcm, rate)
    return path


def merge(into: dict, changes: dict) -> dict:
    """`into` with `changes` written over it, section by section (a nested dict replaces only
    the keys it names): `infer`'s track sections keep their other settings."""
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def params_file(folder: Path, **infer: object) -> Path:
    """The real params.yaml with `infer` keys replaced (small decoding limits for tests)."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    merge(raw["infer"], infer)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


# Infer settings for the tiny models: few tokens, audio cuts sized for the 2 s window.
TINY_INFER = {
    "score": {"max_tokens": 6},
    "speech": {
        "max_tokens": 6,
        "audio": {
            "search_s": 0.6,
            "silence_db": -35.0,
            "overlap_s": 0.25,
            "max_repeats": 3,
            "pause_s": 0.5,
        },
    },
}
