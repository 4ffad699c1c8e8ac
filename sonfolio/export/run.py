"""Exporting one track: its sources, every variant folder with its model card, their metrics."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio import cpu, int8_weights
from sonfolio.ctc_format import folder_decoding
from sonfolio.export.check import weight_check
from sonfolio.export.decoder_step import write_fused
from sonfolio.export.fp32 import export_fp32
from sonfolio.export.int4 import quantize_int4
from sonfolio.export.int8 import quantize_int8
from sonfolio.export.layout import OnnxFileError, file_sizes, variant_names

if TYPE_CHECKING:
    from sonfolio.config.export import Export, TrackExport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """A torch model to export: `name` is `ptq` (the FP32 model) or `qat` (QAT-trained), and
    `quantize` the variants made from it (int8, int4)."""

    name: str
    folder: Path
    quantize: tuple[str, ...]


def sources(cfg: Export, fp32_model: Path, qat_model: Path | None) -> list[Source]:
    """The FP32 model for every PTQ variant, and the QAT model(s) when given.

    The QAT stage trains one model per scheme: `qat_model/int8/` is quantized into `int8_qat`
    and `qat_model/int4/` into `int4_qat`; a single HF folder at `qat_model` feeds both.
    """
    found = [Source("ptq", fp32_model, tuple(cfg.quantize))]
    if qat_model is None:
        return found
    per_scheme = [
        Source("qat", qat_model / q, (q,))
        for q in cfg.quantize
        if (qat_model / q / "config.json").is_file()
    ]
    if per_scheme:
        return found + per_scheme
    if not (qat_model / "config.json").is_file():
        raise FileNotFoundError(
            f"{qat_model} holds no QAT model (no config.json in it nor in its "
            f"{'/, '.join(cfg.quantize)}/ subfolders): run the QAT stage first"
        )
    return [*found, Source("qat", qat_model, tuple(cfg.quantize))]


QUANTIZERS = {"int8": quantize_int8, "int4": quantize_int4}


def quiet_quantizers() -> None:
    """ORT's quantizers log one INFO line per node (thousands): keep their warnings only."""
    for name in ("onnxruntime.quantization", "onnxruntime"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("root").setLevel(logging.getLogger().level)


QAT_ABSENT = "not built: no QAT model yet"


def export_track(
    track: Any,
    cfg: Export,
    card: TrackExport,
    models: list[Source],
    out: Path,
) -> dict[str, Any]:
    """Export each source of `track` (its export face), quantize it into every
    variant of `cfg.quantize`, write a model card per variant folder under `out`, and return
    the metrics (per variant: files, bytes,
    size_ratio, route, weight check; `status` for variants not built).

    `models` holds the FP32 model (name `ptq`: its ONNX export is kept as `fp32/` and its
    quantized variants are post-training quantization) and optionally QAT models (name
    `qat`; only their quantized variants are kept). See `sources`.

    Raises:
        OnnxFileError: an export wrote no merged decoder, or an int8 file kept FP32 weights.
    """
    from rich.progress import Progress

    from sonfolio.io import staged_dir
    from sonfolio.modelcard import render

    quiet_quantizers()
    metrics: dict[str, Any] = {name: {"status": QAT_ABSENT} for name in variant_names(cfg)}
    with staged_dir(out) as tmp, Progress(transient=True) as bar:
        job = bar.add_task(f"export@{track.name}", total=sum(1 + len(m.quantize) for m in models))
        for source in models:
            hidden = f".fp32_{source.name}_{'_'.join(source.quantize)}"
            fp32 = tmp / "fp32" if source.name == "ptq" else tmp / hidden
            log.info("exporting %s (%s) to ONNX", source.folder, source.name)
            track.register_classes(onnx=True)
            export_fp32(source.folder, fp32, track.export_task, cfg)
            bar.advance(job)
            built = {"fp32": fp32} if source.name == "ptq" else {}
            for q in source.quantize:
                name = f"{q}_{source.name}"
                log.info("quantizing %s -> %s", fp32.name, name)
                QUANTIZERS[q](fp32, tmp / name, cfg)
                built[name] = tmp / name
                bar.advance(job)
            for name, folder in built.items():
                metrics[name] = _variant_figures(folder, name, tmp / "fp32", cfg)
                card_text = render(track, card, cfg, name, str(source.folder), metrics[name])
                (folder / "README.md").write_text(card_text, encoding="utf-8")
                # the ORT loop's one decoder, fused once here instead of at every opening
                write_fused(folder)
            if source.name != "ptq":
                shutil.rmtree(fp32)
    return metrics


ROUTES = {
    "fp32": "optimum-onnx main_export with past key/values (merged decoder), FP32",
    "int8": "ORT quantize_dynamic: int8 MatMul weights, dynamic uint8 activations, int8 "
    "embedding tables, all files and merged-decoder subgraphs (EnableSubgraph); then "
    "compact_int8: the tied embedding stored once, Conv weights and position tables stored "
    "int8 (computed FP32), short tensor names",
    "int4": "ORT MatMulNBitsQuantizer: int4 block-wise weight-only MatMulNBits, subgraphs "
    "included; non-MatMul ops FP32",
}

WEIGHT_BITS = {
    7: "7-bit weights (within [-64, 64]): the same numbers on every CPU, no saturation on x86 "
    "without VNNI",
    8: "8-bit weights (within [-127, 127]): accurate only on CPUs with VNNI, AMX or ARM dot "
    "products; ORT's int8 MatMul saturates on x86 without them",
}


def _variant_figures(folder: Path, name: str, fp32: Path, cfg: Export) -> dict[str, Any]:
    sizes = file_sizes(folder)
    check = weight_check(folder)
    kind = name.split("_")[0]
    extra: dict[str, Any] = {}
    if kind == "int8":
        left = {f: c["fp32_weight_matmuls"] for f, c in check.items() if c["fp32_weight_matmuls"]}
        if left:
            raise OnnxFileError(
                f"{name}: FP32 MatMul/Gemm weights left after int8 quantization: {left} "
                "(file: count); the quantizer skipped them"
            )
        weights = int8_weights.int8_weight_range(folder)
        if weights and weights["max_abs"] > 2 ** (cfg.int8_weight_bits - 1):
            raise OnnxFileError(
                f"{name}: int8 weights reach {weights['max_abs']}, past the "
                f"{cfg.int8_weight_bits}-bit range export.int8_weight_bits asks for"
            )
        extra["int8_weights"] = weights
    origin = {"ptq": "the FP32 model (post-training)", "qat": "the QAT-trained model"}
    route = ROUTES[kind] + ("" if name == "fp32" else f", from {origin[name.split('_')[1]]}")
    if kind == "int8":
        route += "; " + WEIGHT_BITS[cfg.int8_weight_bits]
    return {
        "status": "built",
        "route": route,
        "decoding": "ctc" if folder_decoding(folder)[0] else "attention",
        **sizes,
        "size_ratio": round(sizes["bytes"] / file_sizes(fp32)["bytes"], 4),
        "weight_check": check,
        **extra,
        "exported_on": cpu.isa()["summary"],
    }
