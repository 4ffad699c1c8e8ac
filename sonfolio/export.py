"""ONNX export with the KV cache, and ONNX Runtime quantization into variant folders.

Each variant is a folder that optimum's `ORTModelForVision2Seq` / `ORTModelForSpeechSeq2Seq`
load as is: `encoder_model.onnx`, `decoder_model_merged.onnx` (one decoder for the first step
and the steps with past key/values, switched by an `If` node whose two branches are
subgraphs), config.json, generation_config.json, tokenizer and image processor / feature
extractor, and a model card (sonfolio.modelcard).

Routes (docs/export.md says why):
- `fp32`: optimum-onnx `main_export` (task `*-with-past`); the unmerged decoder_model.onnx and
  decoder_with_past_model.onnx are dropped, since ORTModel loads the merged one.
- `int8`: `onnxruntime.quantization.quantize_dynamic`, int8 weights (per channel by param),
  activations quantized at run time, `EnableSubgraph` so the merged decoder's branches are
  quantized too (without it they stay FP32).
- `int4`: `MatMulNBitsQuantizer` (block-wise weight-only, MatMulNBits contrib op); it walks
  subgraphs itself.

Both quantizers see a prepared copy of the graph (`prepare_for_quantization`): weights reached
through a Transpose (tied embedding / output weights) are folded into initializers, and
Gemm nodes with constant weights (GPT-2's Conv1D) become MatMul + Add, which MatMulNBits needs.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sonfolio.config import Export, TrackExport
from sonfolio.io import write_json

log = logging.getLogger(__name__)

ENCODER = "encoder_model.onnx"
DECODER = "decoder_model_merged.onnx"
ONNX_FILES = (ENCODER, DECODER)
UNMERGED = ("decoder_model.onnx", "decoder_with_past_model.onnx")
WEIGHT_OPS = ("MatMul", "Gemm")
# What the quantizers turn them into (int8 dynamic, int8 QOperator, int4 weight-only).
QUANTIZED_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul", "MatMulNBits")
# Nodes that pass a weight through unchanged in value (a folded or dequantized weight is no
# longer FP32-stored, so DequantizeLinear is deliberately not in this list).
_PASS_THROUGH = ("Transpose", "Identity", "Cast", "Reshape")


class OnnxFileError(ValueError):
    """An ONNX file of a variant folder is missing or unreadable; the message names it."""


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


# ---------------------------------------------------------------------------- graph walking


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """`graph` and every subgraph nested in it (If / Loop / Scan branches), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from graphs(sub)


def load_onnx(path: Path) -> onnx.ModelProto:
    """Load and check one ONNX file.

    Raises:
        OnnxFileError: naming the file, when it is missing, not ONNX, or fails onnx.checker.
    """
    if not path.is_file():
        raise OnnxFileError(f"{path} is missing: rerun the export stage that writes it")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as err:  # onnx raises DecodeError, ValidationError, ...: all mean "bad"
        raise OnnxFileError(
            f"{path} is not a valid ONNX model ({type(err).__name__}: {err}); rerun the export "
            "stage that writes it"
        ) from None
    return model


def validate_variant(folder: Path) -> None:
    """Check that a variant folder holds readable ONNX files before a runtime opens it.

    Raises:
        OnnxFileError: naming the missing or corrupt file.
    """
    for name in ONNX_FILES:
        load_onnx(folder / name)


def fp32_weight_matmuls(model: onnx.ModelProto) -> dict[str, int]:
    """MatMul / Gemm nodes whose weight is still an FP32 (or FP16) initializer, subgraphs
    included, against all MatMul / Gemm nodes that take a constant weight of any type.

    A weight counts as constant when it is an initializer of the node's graph or of an
    enclosing one (subgraphs read outer initializers by name), possibly through a Transpose,
    Identity, Cast or Reshape. Returns {"fp32_weight_matmuls": n, "weight_matmuls": m,
    "quantized_matmuls": q} (q: MatMulInteger, DynamicQuantizeMatMul, ... nodes).
    """
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
    counts = {"fp32_weight_matmuls": 0, "weight_matmuls": 0, "quantized_matmuls": 0}

    def visit(graph: onnx.GraphProto, outer: dict[str, bool]) -> None:
        consts = dict(outer)  # name -> stored as float
        consts.update({i.name: i.data_type in float_types for i in graph.initializer})
        for node in graph.node:
            if node.op_type == "Constant":
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                if value is not None and len(value.dims) >= 2:
                    consts[node.output[0]] = value.data_type in float_types
            elif node.op_type in _PASS_THROUGH and node.input and node.input[0] in consts:
                consts[node.output[0]] = consts[node.input[0]]
            elif node.op_type in QUANTIZED_OPS:
                counts["quantized_matmuls"] += 1
            elif node.op_type in WEIGHT_OPS:
                weights = [consts[x] for x in node.input[:2] if x in consts]
                if weights:
                    counts["weight_matmuls"] += 1
                    counts["fp32_weight_matmuls"] += any(weights)
            for attr in node.attribute:
                subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs
                for sub in subs:
                    visit(sub, consts)

    visit(model.graph, {})
    return counts


# ---------------------------------------------------------------------------- preparation


def prepare_for_quantization(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy where every constant weight of a MatMul is an initializer the quantizers see.

    Written here because neither quantizer does it: ORT's quantizers only quantize a MatMul
    whose weight is itself an initializer, and MatMulNBits handles MatMul only. optimum ties
    the output projection to the embedding with a Transpose node (so the lm_head stayed FP32),
    and GPT-2's Conv1D exports as Gemm (so int4 skipped every decoder layer).
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    top = model.graph
    inits = {i.name: i for i in top.initializer}
    for graph in graphs(top):
        _fold_transposes(graph, top, inits)
        _gemm_to_matmul(graph, top, inits)
    return model


def _fold_transposes(
    graph: onnx.GraphProto, top: onnx.GraphProto, inits: dict[str, onnx.TensorProto]
) -> None:
    """Transpose(initializer) -> a transposed initializer in the top graph (subgraphs see it)."""
    keep = []
    for node in graph.node:
        if node.op_type == "Transpose" and len(node.input) == 1 and node.input[0] in inits:
            array = numpy_helper.to_array(inits[node.input[0]])
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            name = node.output[0]
            if name not in inits:
                inits[name] = numpy_helper.from_array(
                    np.ascontiguousarray(array.transpose(perm)), name
                )
                top.initializer.append(inits[name])
            continue
        keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)


def _attr(node: onnx.NodeProto, name: str, default: float) -> float:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _gemm_to_matmul(
    graph: onnx.GraphProto, top: onnx.GraphProto, inits: dict[str, onnx.TensorProto]
) -> None:
    """Gemm(A, W, C) with constant W, alpha = beta = 1, transA = 0 -> MatMul(A, W') + C."""
    nodes = []
    for node in graph.node:
        plain = _attr(node, "alpha", 1.0) == 1.0 and _attr(node, "beta", 1.0) == 1.0
        if (
            node.op_type != "Gemm"
            or node.input[1] not in inits
            or not plain
            or _attr(node, "transA", 0)
        ):
            nodes.append(node)
            continue
        weight = node.input[1]
        if _attr(node, "transB", 0):
            name = f"{weight}_T"
            if name not in inits:
                array = numpy_helper.to_array(inits[weight]).T
                inits[name] = numpy_helper.from_array(np.ascontiguousarray(array), name)
                top.initializer.append(inits[name])
            weight = name
        has_bias = len(node.input) > 2 and node.input[2]
        out = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], weight], [out], name=node.name))
        if has_bias:
            nodes.append(
                helper.make_node(
                    "Add", [out, node.input[2]], [node.output[0]], name=f"{node.name}_bias"
                )
            )
    del graph.node[:]
    graph.node.extend(nodes)


# ---------------------------------------------------------------------------- export + quantize


def export_fp32(model_dir: Path, out: Path, task: str, cfg: Export) -> None:
    """optimum-onnx export with past key/values into `out` (ONNX, configs, tokenizer,
    processor), keeping only the files ORTModel loads (encoder + merged decoder)."""
    from optimum.exporters.onnx import main_export

    shapes = dummy_shapes(model_dir)
    main_export(str(model_dir), str(out), task=task, opset=cfg.opset, device="cpu", **shapes)
    for name in UNMERGED:
        (out / name).unlink(missing_ok=True)
    for name in ONNX_FILES:
        if not (out / name).is_file():
            raise OnnxFileError(
                f"optimum's export of {model_dir} (task {task}) wrote no {name}: this model "
                "type may not support the merged decoder in optimum-onnx"
            )


def dummy_shapes(model_dir: Path) -> dict[str, int]:
    """Shapes of the dummy inputs the exporter traces with, where the default is wrong.

    Whisper's time axis is fixed by the model (max_source_positions encoder positions after a
    stride-2 convolution), and optimum's dummy input assumes 3000 frames (30 s).
    """
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") == "whisper":
        return {"nb_max_frames": 2 * int(config["max_source_positions"])}
    return {}


def copy_companions(src: Path, dst: Path) -> None:
    """config.json, generation_config.json, tokenizer, processor: everything but ONNX/README."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.is_file() and path.suffix != ".onnx" and path.name != "README.md":
            shutil.copy2(path, dst / path.name)


def quantize_int8(src: Path, dst: Path, cfg: Export) -> None:
    """Dynamic int8 of every ONNX file, merged decoder subgraphs included."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    copy_companions(src, dst)
    for name in ONNX_FILES:
        prepared = prepare_for_quantization(load_onnx(src / name))
        quantize_dynamic(
            prepared,
            dst / name,
            per_channel=cfg.per_channel,
            weight_type=QuantType.QInt8,
            extra_options={"EnableSubgraph": True},
        )


def quantize_int4(src: Path, dst: Path, cfg: Export) -> None:
    """Block-wise int4 weight-only (MatMulNBits) of every MatMul weight, subgraphs included."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    copy_companions(src, dst)
    for name in ONNX_FILES:
        prepared = prepare_for_quantization(load_onnx(src / name))
        quantizer = MatMulNBitsQuantizer(
            prepared,
            block_size=cfg.int4_block_size,
            is_symmetric=cfg.int4_symmetric,
            accuracy_level=cfg.int4_accuracy_level,
        )
        quantizer.process()
        quantizer.model.save_model_to_file(str(dst / name), use_external_data_format=False)


QUANTIZERS = {"int8": quantize_int8, "int4": quantize_int4}


def quiet_quantizers() -> None:
    """ORT's quantizers log one INFO line per node (thousands): keep their warnings only."""
    for name in ("onnxruntime.quantization", "onnxruntime"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("root").setLevel(logging.getLogger().level)


def file_sizes(folder: Path) -> dict[str, Any]:
    """Bytes of each ONNX file and their total."""
    files = {name: (folder / name).stat().st_size for name in ONNX_FILES}
    return {"files": files, "bytes": sum(files.values())}


def weight_check(folder: Path) -> dict[str, dict[str, int]]:
    """fp32_weight_matmuls per ONNX file (see fp32_weight_matmuls)."""
    return {name: fp32_weight_matmuls(load_onnx(folder / name)) for name in ONNX_FILES}


# ---------------------------------------------------------------------------- one track


@dataclass(frozen=True)
class TrackSpec:
    """What differs between the two tracks' export and bench stages."""

    task: str  # optimum-onnx export task, with past key/values
    ort_class: str  # optimum.onnxruntime class that loads a variant folder
    pipeline_tag: str
    title: str
    summary: str
    data: str
    train_stage: str
    export_stage: str
    bench_stage: str


QAT_ABSENT = "not built: no QAT model yet"


def variant_names(cfg: Export) -> list[str]:
    """Every variant a track can have, in report order."""
    return ["fp32", *(f"{q}_{s}" for s in ("ptq", "qat") for q in cfg.quantize)]


def export_track(
    track: TrackSpec,
    cfg: Export,
    card: TrackExport,
    models: list[Source],
    out: Path,
) -> dict[str, Any]:
    """Export each source, quantize it into every variant of `cfg.quantize`, write a model card
    per variant folder under `out`, and return the metrics (per variant: files, bytes,
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
        job = bar.add_task(track.export_stage, total=sum(1 + len(m.quantize) for m in models))
        for source in models:
            hidden = f".fp32_{source.name}_{'_'.join(source.quantize)}"
            fp32 = tmp / "fp32" if source.name == "ptq" else tmp / hidden
            log.info("exporting %s (%s) to ONNX", source.folder, source.name)
            export_fp32(source.folder, fp32, track.task, cfg)
            bar.advance(job)
            built = {"fp32": fp32} if source.name == "ptq" else {}
            for q in source.quantize:
                name = f"{q}_{source.name}"
                log.info("quantizing %s -> %s", fp32.name, name)
                QUANTIZERS[q](fp32, tmp / name, cfg)
                built[name] = tmp / name
                bar.advance(job)
            for name, folder in built.items():
                metrics[name] = _variant_figures(folder, name, tmp / "fp32")
                card_text = render(track, card, cfg, name, str(source.folder), metrics[name])
                (folder / "README.md").write_text(card_text, encoding="utf-8")
            if source.name != "ptq":
                shutil.rmtree(fp32)
    return metrics


ROUTES = {
    "fp32": "optimum-onnx main_export with past key/values (merged decoder), FP32",
    "int8": "ORT quantize_dynamic: int8 weights, dynamic uint8 activations, all files and "
    "merged-decoder subgraphs (EnableSubgraph)",
    "int4": "ORT MatMulNBitsQuantizer: int4 block-wise weight-only MatMulNBits, subgraphs "
    "included; non-MatMul ops FP32",
}


def _variant_figures(folder: Path, name: str, fp32: Path) -> dict[str, Any]:
    sizes = file_sizes(folder)
    check = weight_check(folder)
    kind = name.split("_")[0]
    if kind == "int8":
        left = {f: c["fp32_weight_matmuls"] for f, c in check.items() if c["fp32_weight_matmuls"]}
        if left:
            raise OnnxFileError(
                f"{name}: FP32 MatMul/Gemm weights left after int8 quantization: {left} "
                "(file: count); the quantizer skipped them"
            )
    origin = {"ptq": "the FP32 model (post-training)", "qat": "the QAT-trained model"}
    route = ROUTES[kind] + ("" if name == "fp32" else f", from {origin[name.split('_')[1]]}")
    return {
        "status": "built",
        "route": route,
        **sizes,
        "size_ratio": round(sizes["bytes"] / file_sizes(fp32)["bytes"], 4),
        "weight_check": check,
    }


def run_stage(
    spec: TrackSpec,
    cfg: Export,
    card: TrackExport,
    fp32_model: Path,
    qat_model: Path | None,
    out: Path,
    metrics_path: Path,
) -> dict[str, Any]:
    """An export stage: `fp32_model` (and the QAT model(s) under `qat_model` when given: one
    folder per scheme, int8/ and int4/, or one HF folder) into the variant folders under `out`,
    metrics to `metrics_path`.

    Raises:
        OnnxFileError: an export wrote no merged decoder, or an int8 file kept FP32 weights.
    """
    metrics = export_track(spec, cfg, card, sources(cfg, fp32_model, qat_model), out)
    metrics["torch_fp32_bytes"] = sum(f.stat().st_size for f in fp32_model.glob("*.safetensors"))
    write_json(metrics_path, metrics)
    log.info(
        "%s: %s",
        spec.export_stage,
        {k: v.get("bytes", v.get("status")) for k, v in metrics.items() if isinstance(v, dict)},
    )
    return metrics
