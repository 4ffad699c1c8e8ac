"""A score model that reads with its CTC head (score_train.decode: ctc): the head is saved
beside the weights, carried into every ONNX variant as the encoder's `ctc_logits` output, and
every runtime (torch, the ORT loop, optimum's session, int8 and int4) reads the same symbols
as the head does in PyTorch; a folder that lost its head fails by name."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from sonfolio import variants
from sonfolio.config.params import load_params
from sonfolio.ctc_format import CTC_OUTPUT
from sonfolio.export.layout import ENCODER
from sonfolio.tracks import face
from sonfolio.train import ctc
from tasks.export import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ctc_model(tiny_score_model, tmp_path_factory) -> tuple[Path, Path]:
    """The export tests' tiny model (weights drawn wide, so outputs differ by image), marked
    to read with a CTC head drawn the same way, saved as score_train saves it."""
    from sonfolio.score.model.model import load_trained

    src, data = tiny_score_model
    out = tmp_path_factory.mktemp("ctc") / "score_fp32"
    shutil.copytree(src, out)
    model = load_trained(out)
    ctc.set_decoding(model, "ctc")
    torch.manual_seed(1)
    head = ctc.attach(model)
    with torch.no_grad():
        head.weight.normal_(0.0, 0.2)
        head.bias[model.config.pad_token_id] = 1.0  # blanks between symbols, as trained
    ctc.save_pretrained(model, out)
    return out, data


@pytest.fixture(scope="module")
def exported(ctc_model, tmp_path_factory) -> Path:
    model, _ = ctc_model
    params = load_params(ROOT / "params.yaml")
    out = tmp_path_factory.mktemp("ctc_onnx") / "score_onnx"
    score = face("score", "export")
    run(score, params.export, params.score_export, model, None, out, out / "m.json")
    return out


def _pixels(data: Path, model: Path) -> torch.Tensor:
    from transformers import AutoConfig

    from sonfolio.io import read_jsonl
    from sonfolio.score.model.batches import load_image, to_pixel_values

    shape = AutoConfig.from_pretrained(str(model)).encoder.image_size
    rows = read_jsonl(data / "manifest.jsonl")
    return to_pixel_values(np.stack([load_image(data / r["image"], *shape) for r in rows]))


def test_collapse_merges_repeats_and_drops_blanks():
    best = np.array([[0, 5, 5, 0, 5, 7, 7, 0], [3, 3, 3, 3, 0, 0, 0, 0]])
    assert ctc.collapse(best, blank=0) == [[5, 5, 7], [3]]
    assert ctc.collapse(best, blank=0, limit=2) == [[5, 5], [3]]


def test_the_saved_model_is_the_plain_class_with_its_head_beside_it(ctc_model):
    from safetensors.torch import load_file
    from transformers import VisionEncoderDecoderModel

    folder, _ = ctc_model
    assert not [k for k in load_file(str(folder / "model.safetensors")) if "ctc" in k]
    plain = VisionEncoderDecoderModel.from_pretrained(str(folder))  # any transformers loader
    assert ctc.decodes_with_ctc(plain.config) and not hasattr(plain, ctc.HEAD)
    loaded = ctc.load_head(plain, folder)
    saved = load_file(str(folder / ctc.HEAD_FILE))
    assert torch.equal(loaded.ctc_head.weight, saved["weight"])


def test_every_variant_reads_the_symbols_the_torch_head_reads(ctc_model, exported):
    folder, data = ctc_model
    pixels = _pixels(data, folder)
    torch_variant = variants.load(folder, threads=1, device="cpu")
    want_ids = ctc.greedy(torch_variant.model, pixels, 32)
    assert len({tuple(r) for r in want_ids}) >= len(want_ids) // 2, "outputs must differ"
    want = torch_variant.generate(pixels, 32)
    assert want == torch_variant.tokenizer.batch_decode(want_ids, skip_special_tokens=True)
    card = (exported / "int8_ptq" / "README.md").read_text()
    assert "decoding: ctc" in card and 'enc.run(["ctc_logits"]' in card
    graph = onnx.load(str(exported / "fp32" / ENCODER), load_external_data=False).graph
    assert [o.name for o in graph.output][1:] == [CTC_OUTPUT]
    fp32 = variants.load(exported / "fp32", threads=1)
    assert fp32.generate(pixels, 32) == want
    with torch.no_grad():
        states = torch_variant.model.encoder(pixels).last_hidden_state
        best = torch_variant.model.ctc_head(states).argmax(-1).numpy()
    common = np.bincount(best.ravel()).max() / best.size  # measured 23 %
    for name, floor in (("int8_ptq", 0.9), ("int4_ptq", 0.5)):
        variant = variants.load(exported / name, threads=1)
        assert len(variant.generate(pixels, 32)) == len(want)
        # the label each encoder position reads, against torch FP32's, on this random model
        # whose margins are thin: measured 91.0 % (int8, 7-bit weights: the same integers on
        # every CPU) and 67.2 % (int4, 32-column blocks) on an AVX2-only CPU. 8-bit weights
        # gave 94.6 % with VNNI and 77.2 % without (saturation: docs/export.md). A broken head
        # or encoder that reads one label everywhere agrees at most `common`
        same = (variant.loop.encode(pixels.numpy()).argmax(-1) == best).mean()
        assert same >= max(floor, 2 * common), f"{name}: {same:.1%} of positions agree"


def test_bench_runtimes_read_with_the_head(ctc_model, exported, loop_spec):
    from dataclasses import replace

    from sonfolio.bench.case import Case
    from sonfolio.bench.loop_runtime import loop_runtime
    from sonfolio.bench.ort_runtime import OrtRuntime
    from sonfolio.bench.torch_runtime import TorchRuntime
    from sonfolio.infer.ortloop import OrtCtc

    folder, data = ctc_model
    pixels = _pixels(data, folder).numpy()[:6]
    spec = loop_spec(exported / "fp32", "score")
    want = TorchRuntime(replace(spec, case=Case("torch_fp32", "torch", str(folder)))).generate(
        pixels, 16, True
    )
    loop = loop_runtime(spec)
    assert isinstance(loop, OrtCtc)
    assert loop.generate(pixels, 16, True) == want
    assert OrtRuntime(spec).generate(pixels, 16, True) == want


def test_a_folder_without_its_head_fails_by_name(ctc_model, exported, tmp_path):
    folder, _ = ctc_model
    torch_copy = shutil.copytree(folder, tmp_path / "score_fp32")
    (torch_copy / ctc.HEAD_FILE).unlink()
    with pytest.raises(variants.VariantError, match="ctc_head.safetensors"):
        variants.load(torch_copy, threads=1, device="cpu")
    onnx_copy = shutil.copytree(exported / "fp32", tmp_path / "fp32")
    model = onnx.load(str(onnx_copy / ENCODER))
    del model.graph.output[1]
    onnx.save(model, str(onnx_copy / ENCODER))
    with pytest.raises(variants.VariantError, match=f"no {CTC_OUTPUT} output"):
        variants.load(onnx_copy, threads=1)


def test_the_onnx_side_reads_ctc_models_without_importing_torch():
    """The bench measures each ONNX and CTranslate2 variant's memory in a worker process: torch
    imported there (by way of the CTC code) added ~300 MB to every one of them."""
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, sys, sonfolio.bench, sonfolio.export, sonfolio.infer.ortloop\n"
        "for package in (sonfolio.bench, sonfolio.export):\n"
        "    for found in pkgutil.iter_modules(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(found.name)\n"
        "heavy = sorted({'torch', 'transformers'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
