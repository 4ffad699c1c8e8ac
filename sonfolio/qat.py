"""Quantization-aware training with torchao, on the training engine.

torchao's QAT API (`QATConfig`): `prepare` swaps every nn.Linear for one that fake-quantizes
its weights (and, for int8, its activations) in the forward pass, so fine-tuning learns weights
that survive rounding; `convert` with no base config strips the fake quantization and leaves
plain Linear layers holding the QAT-trained weights. That plain model is what is saved
(`save_pretrained`, the transformers class as ever, with its CTC head beside it where the
model reads with one; the head is a Linear too, so it trains fake-quantized) and exported:
torchao's own converted int8 modules do not export to ONNX (docs/export.md), so ONNX Runtime
quantizes the QAT weights on the same grid they were trained for.

Schemes (params: <track>_qat.schemes):
- int8: int8 dynamic per-token activations, symmetric per-channel weights on the grid the
  export uses (export.int8_weight_bits: 7 by default, [-64, 64]; sonfolio.cpu says why)
  (`Int8DynamicActivationIntxWeightConfig`): what ONNX Runtime's dynamic int8 runs.
- int4: int4 symmetric group-wise weights, activations in float (`IntxWeightOnlyConfig` with
  `PerGroup(group_size)`): what ONNX Runtime's MatMulNBits runs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn
from transformers import PreTrainedModel

from sonfolio.io import staged_dir, write_json
from sonfolio.train import checkpoint, ctc
from sonfolio.train.device import choose_precision, detect_backend
from sonfolio.train.engine import train
from sonfolio.train.run import RunPaths, Track

if TYPE_CHECKING:
    from sonfolio.config.qat import QatTrain
    from sonfolio.config.train import EngineOptions

log = logging.getLogger(__name__)

Scheme = Literal["int8", "int4"]


def base_config(scheme: Scheme, group_size: int, int8_bits: int = 8):
    """The torchao config whose numerics the fake quantization imitates; `int8_bits` 7 keeps
    int8 weights on ORT's 7-bit grid (export.int8_weight_bits; torchao's int7 is [-64, 63]
    with scale max|w| / 63.5, ORT's [-64, 64] with max|w| / 64: within 1 % of each other)."""
    # imported here: torchao is heavy and prints kernel-loading warnings at import
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerAxis, PerGroup

    if scheme == "int8":
        return Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int7 if int8_bits == 7 else torch.int8,
            weight_granularity=PerAxis(0),
        )
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size))


def prepare(model: PreTrainedModel, scheme: Scheme, group_size: int, int8_bits: int = 8) -> int:
    """Insert fake quantization into `model` in place; returns the number of Linear layers.

    Raises:
        ValueError: an int4 group size that does not divide some Linear's input width.
    """
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if scheme == "int4":
        bad = [n for n, m in linears if m.in_features % group_size]
        if bad:
            raise ValueError(
                f"int4 group_size {group_size} does not divide the input width of {bad[:3]}: "
                "set <track>_qat.int4_group_size to a divisor (32 or 64 usually)"
            )
    # torchao's default filter: every nn.Linear (the group-size check above covers them all)
    quantize_(model, QATConfig(base_config(scheme, group_size, int8_bits), step="prepare"))
    log.info("QAT %s: fake quantization in %d Linear layers", scheme, len(linears))
    return len(linears)


def convert(model: PreTrainedModel) -> PreTrainedModel:
    """Strip the fake quantization, keeping the QAT-trained weights (plain nn.Linear again)."""
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    quantize_(model, QATConfig(step="convert"))
    left = [n for n, m in model.named_modules() if type(m).__name__.startswith("FakeQuantized")]
    if left:
        raise RuntimeError(f"fake quantization left in {left[:3]} after convert")
    return model


@dataclass(frozen=True)
class QatJob:
    """One track's QAT: what every scheme trains from, and where its resumable state lives."""

    track: str
    cfg: QatTrain  # <track>_qat
    opts: EngineOptions
    load: Callable[[Path], PreTrainedModel]  # reads a model folder, ready to train
    fp32: Path  # the trained FP32 model folder every scheme starts from
    make_track: Callable[[PreTrainedModel], Track]  # the engine's view of a prepared model
    inputs: list[Path]  # data and tokenizer files: they key the checkpoints with the config
    checkpoints: Path
    live: Path | None  # live curves, a folder per scheme under it; None: none
    int8_bits: int  # export.int8_weight_bits: train for the grid the export quantizes to

    @property
    def stage(self) -> str:
        """Its params section, checkpoint folder and curves: <track>_qat."""
        return f"{self.track}_qat"


def train_schemes(
    job: QatJob, save: Callable[[PreTrainedModel, Path], None], out: Path
) -> tuple[dict[str, Any], list[Path]]:
    """QAT-train a fresh copy of the FP32 model in `job.fp32` per scheme; `save` writes each
    converted model into `out/<scheme>/` (a folder the caller has staged). Returns the
    metrics per scheme and the checkpoint folders, for the caller to remove once `out` is in
    place.

    Resumable: each scheme has its own checkpoint folder, and a finished scheme leaves its
    converted model there (`done/`) until every scheme is saved, so a crash in the second
    scheme does not redo the first. `job.inputs` (data, tokenizer and FP32 model files) key
    the checkpoints with the config.
    """
    metrics: dict[str, Any] = {}
    folders = []
    # under DDP every process trains; the main process alone reads a finished scheme back and
    # writes
    main = _main_process()
    cfg, stage, int8_bits = job.cfg, job.stage, job.int8_bits
    for scheme in cfg.schemes:
        key = checkpoint.fingerprint(
            {
                "cfg": cfg.model_dump(),
                "opts": job.opts.model_dump(),
                "scheme": scheme,
                "int8_bits": int8_bits,
            },
            job.inputs,
        )
        folder = checkpoint.run_folder(job.checkpoints, f"{stage}/{scheme}", key)
        folders.append(folder)
        done = folder / "done"
        if (done / "metrics.json").is_file():
            if not main:
                continue
            log.info("%s %s: already trained in %s", stage, scheme, done)
            model = job.load(done)
            result_metrics = json.loads((done / "metrics.json").read_text())
        else:
            model = job.load(job.fp32)
            prepare(model, scheme, cfg.int4_group_size, int8_bits)
            scheme_live = job.live / scheme if job.live else None
            paths = RunPaths(folder, scheme_live, job.checkpoints / "micro_batch.json")
            result = train(job.make_track(model), cfg, job.opts, paths)
            if not result.accelerator.is_main_process:
                continue
            model = convert(result.model)
            result_metrics = {**result.metrics, "scheme": scheme}
            if scheme == "int8":
                result_metrics["int8_weight_bits"] = int8_bits
            tmp = folder / ".done.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            ctc.save_pretrained(model, tmp)
            write_json(tmp / "metrics.json", result_metrics)
            tmp.rename(done)
        save(model, out / scheme)
        metrics[scheme] = result_metrics
    return metrics, folders


def run_stage(job: QatJob, out: Path, metrics_path: Path) -> dict[str, Any]:
    """The QAT stage of `job.track`: every scheme of `job.cfg` trained from the model in
    `job.fp32`, each converted model saved with the FP32 folder's tokenizer and processor
    under `out/<scheme>/`; `out` appears only when all are done.

    Raises:
        FileNotFoundError (no trained model), DeviceCannotDo, TooManyBadSamples,
        TrainingDiverged, ValueError.
    """
    # what the device cannot do fails first, before any model is read
    choose_precision(job.opts.precision, detect_backend())
    track, fp32, stage = job.track, job.fp32, job.stage
    if not (fp32 / "config.json").is_file():
        raise FileNotFoundError(f"{fp32} holds no trained model: run `dvc repro train@{track}`")
    if ctc.folder_decoding(fp32)[0] and job.cfg.ctc_weight == 0:
        raise ValueError(
            f"{fp32} reads with its CTC head ({ctc.DECODING}), which {stage}.ctc_weight: 0 "
            f"would leave untrained under fake quantization: set {stage}.ctc_weight above 0 "
            "(as in training)"
        )
    if not ctc.folder_decoding(fp32)[0] and job.cfg.ctc_weight == 1:
        raise ValueError(
            f"{fp32} reads with its decoder, which {stage}.ctc_weight: 1 (CTC alone) would "
            f"leave out of fake-quantized training: set {stage}.ctc_weight below 1"
        )
    extras = [p for p in fp32.iterdir() if p.suffix == ".json" and not _model_file(p.name)]

    def save(model: PreTrainedModel, folder: Path) -> None:
        ctc.save_pretrained(model, folder)  # and the CTC head of a model that reads with it
        for path in extras:  # tokenizer and image processor / feature extractor files
            shutil.copy2(path, folder / path.name)

    job = replace(job, inputs=[*job.inputs, *sorted(fp32.glob("*.safetensors"))])
    if not _main_process():
        # the other processes of a DDP run train beside the main one, which alone writes
        return train_schemes(job, save, out)[0]
    with staged_dir(out) as tmp:
        metrics, folders = train_schemes(job, save, tmp)
    write_json(metrics_path, metrics)
    for folder in folders:
        shutil.rmtree(folder)  # finished: nothing left to resume
    return metrics


def _main_process() -> bool:
    """Whether this is the main process (global rank 0) of a launch, read from the rank that
    torchrun and `accelerate launch` set: known before the engine's Accelerator exists, and
    without making one whose settings it would then fix."""
    return os.environ.get("RANK", "0") == "0"


def _model_file(name: str) -> bool:
    return name in ("config.json", "generation_config.json")
