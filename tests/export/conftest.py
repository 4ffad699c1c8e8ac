"""A tiny score model whose greedy outputs differ from image to image.

Measured: 60 optimizer steps of tests/train/tiny.py's run collapse to one text for every
image (the most common system), which would make an agreement rate meaningless. So the model
is the real tiny architecture (sonfolio.score.model.model.build; with 3 decoder layers, below) with
weights drawn wider than the default initialisation (std 0.05, not 0.02): its outputs then
depend on the image, with margins that int8 rounding must preserve; seconds instead of
minutes to make.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_score_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model folder as score_train writes it, data folder with images and manifest), with
    the ViT encoder: these tests are about the decoders' export (the KV cache, the merged
    decoder's branches, the CTC head), and a random conv encoder, however its weights are
    drawn, gives one text for every image (measured: 1 distinct of 40)."""
    return _tiny_model(tmp_path_factory.mktemp("export_tiny"), "vit")


@pytest.fixture(scope="session")
def tiny_conv_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same with the conv encoder (the default), its batch norms set from the images."""
    return _tiny_model(tmp_path_factory.mktemp("export_conv"), "conv")


def _tiny_model(root: Path, encoder: str) -> tuple[Path, Path]:
    from train.tiny import WIDTH, make_score_data, tiny_config  # tests/ is on sys.path
    from transformers import AutoTokenizer

    from sonfolio.score.model import model as score_model
    from sonfolio.score.model.batches import image_processor

    data = make_score_data(root / "data", {"train": 24, "val": 8, "test": 8})
    tok = AutoTokenizer.from_pretrained(str(data / "tokenizer"))
    cfg, _ = tiny_config(model={"encoder": encoder})
    torch.manual_seed(0)
    # 3 decoder layers, not tiny's 1: these tests are about the attention decoder's export
    # (the KV cache, the merged decoder's branches), and a 1-layer random decoder reads the
    # image too little for outputs to differ (11 distinct of 40 against 22)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(score_model.SIZES, "tiny", replace(score_model.SIZES["tiny"], dec_layers=3))
        model = score_model.build(cfg.model, tok, WIDTH).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "wpe" not in name:
                p.normal_(0.0, 0.05)
        _batch_norm_statistics(model.encoder, data)
    out = root / "model"
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    image_processor(*model.config.encoder.image_size).save_pretrained(str(out))
    return out, data


def _batch_norm_statistics(encoder: torch.nn.Module, data: Path) -> None:
    """A conv encoder's batch norms given the statistics of the train images (as training
    leaves them), not their initial 0 and 1, which make every image read alike."""
    from sonfolio.io import read_jsonl
    from sonfolio.score.model.batches import load_image, to_pixel_values

    norms = [m for m in encoder.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    import numpy as np

    height, width = encoder.config.image_size
    rows = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "train"]
    pixels = to_pixel_values(np.stack([load_image(data / r["image"], height, width) for r in rows]))
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a plain average over this one pass
    encoder.train()
    encoder(pixel_values=pixels)
    encoder.eval()
    for m in norms:
        m.momentum = 0.1


@pytest.fixture
def loop_spec() -> Any:
    """spec(folder, track): a bench Spec for comparing the lean greedy loop with optimum's
    generate on `folder` (one thread, no timing: only the tokens matter)."""
    return _loop_spec


def _loop_spec(folder: Path, track: str) -> Any:
    from sonfolio.bench.case import Case, Spec

    return Spec(
        case=Case("ortloop_int8_ptq", "ort_loop", str(folder)),
        track=track,
        inputs="",
        threads=1,
        decoder_threads=1,
        spin_wait=False,
        warmup=0,
        batch_size=3,
        decode_tokens=6,
        quality_tokens=6,
        io_binding=False,
        prompt=[1],
        eos_id=2,
        quality=False,
    )


@pytest.fixture(scope="session")
def hub_whisper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/export/hub_whisper.py's model folder."""
    from export import hub_whisper  # tests/ is on sys.path

    return hub_whisper.build(tmp_path_factory.mktemp("hub_whisper") / "model")


@pytest.fixture(scope="session")
def hub_whisper_onnx(hub_whisper: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its FP32 ONNX export, as the export stage writes it."""
    from export import hub_whisper as model

    return model.export(hub_whisper, tmp_path_factory.mktemp("hub_whisper_onnx") / "fp32")
