"""ONNX export with the KV cache, and ONNX Runtime quantization into variant folders.

Each variant is a folder that optimum's `ORTModelForVision2Seq` / `ORTModelForSpeechSeq2Seq`
load as is: `encoder_model.onnx`, `decoder_model_merged.onnx` (one decoder for the first step
and the steps with past key/values, switched by an `If` node whose two branches are
subgraphs), config.json, generation_config.json, tokenizer and image processor / feature
extractor, and a model card (sonfolio.modelcard).

Routes (docs/export.md says why):
- `fp32`: optimum-onnx `main_export` (task `*-with-past`); the unmerged decoder_model.onnx and
  decoder_with_past_model.onnx are dropped, since ORTModel loads the merged one. A model that
  reads with its CTC head (sonfolio.train.ctc) gets the head in its encoder graph, as the
  output `ctc_logits`.
- `int8`: `onnxruntime.quantization.quantize_dynamic` of MatMul and Gather, int8 weights (per
  channel by param), activations quantized at run time, `EnableSubgraph` so the merged
  decoder's branches are quantized too (without it they stay FP32); then `compact_int8`
  (one int8 copy of a tied embedding, int8-stored Conv weights and position tables, no
  value_info, short tensor names).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sonfolio import cpu
from sonfolio.config import Export, TrackExport
from sonfolio.ctc_format import CTC_OUTPUT, DECODING, HEAD_FILE, folder_decoding
from sonfolio.onnx_graphs import graphs

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
    if folder_decoding(model_dir)[0]:
        add_ctc_output(out / ENCODER, model_dir / HEAD_FILE)


def add_ctc_output(encoder: Path, head_file: Path) -> None:
    """Add the CTC head to an exported encoder: `ctc_logits` (batch, positions, vocabulary) =
    last_hidden_state @ W.T + b, a second output after the hidden states (which ORTModel and
    the greedy loop read as before). A MatMul with a constant weight, so the int8 and int4
    quantizers treat it as every other layer.

    Raises:
        OnnxFileError: no head file beside a model whose config says it reads with one.
    """
    from safetensors.numpy import load_file

    if not head_file.is_file():
        raise OnnxFileError(
            f"{head_file.parent}/config.json says {DECODING}: true but {head_file.name} is "
            "missing: rerun the training stage that writes it"
        )
    head = load_file(str(head_file))
    model = load_onnx(encoder)
    graph = model.graph
    states = graph.output[0]
    weight = numpy_helper.from_array(
        np.ascontiguousarray(head["weight"].T.astype(np.float32)), "ctc_head.weight"
    )
    bias = numpy_helper.from_array(head["bias"].astype(np.float32), "ctc_head.bias")
    graph.initializer.extend([weight, bias])
    graph.node.extend(
        [
            helper.make_node(
                "MatMul", [states.name, weight.name], ["ctc_head.matmul"], "ctc_matmul"
            ),
            helper.make_node("Add", ["ctc_head.matmul", bias.name], [CTC_OUTPUT], "ctc_add"),
        ]
    )
    dims = states.type.tensor_type.shape.dim
    shape = [d.dim_param or d.dim_value for d in dims[:2]] + [int(head["weight"].shape[0])]
    graph.output.append(helper.make_tensor_value_info(CTC_OUTPUT, onnx.TensorProto.FLOAT, shape))
    onnx.checker.check_model(model)
    onnx.save(model, str(encoder))


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
    """Dynamic int8 of every ONNX file, merged decoder subgraphs included, then `compact_int8`.

    Only MatMul (int8 weights, per channel by param) and Gather (embedding tables) are
    quantized by ORT; Conv is left to `compact_int8` (stored int8, computed FP32), since ORT's
    ConvInteger ran slower than its FP32 Conv here (docs/export.md). Gathers that read a table
    tied to a MatMul weight are skipped: `compact_int8` points them at the MatMul's int8 copy.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    copy_companions(src, dst)
    for name in ONNX_FILES:
        prepared = prepare_for_quantization(load_onnx(src / name))
        tied = tied_tables(prepared)
        quantize_dynamic(
            prepared,
            dst / name,
            per_channel=cfg.per_channel,
            weight_type=QuantType.QInt8,
            # 7 bits: weights in [-64, 64], so u8 x s8 pairs never saturate VPMADDUBSW's 16-bit
            # sums on x86 without VNNI (sonfolio.cpu); the same numbers on every CPU
            reduce_range=cfg.int8_weight_bits == 7,
            op_types_to_quantize=["MatMul", "Gather"],
            nodes_to_exclude=_name_gathers(prepared, tied),
            extra_options={"EnableSubgraph": True},
        )
        model = onnx.load(str(dst / name))
        compact_int8(model, tied)
        onnx.save(model, str(dst / name))


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


def with_past_decoder(merged: onnx.ModelProto) -> onnx.ModelProto:
    """The merged decoder's with-past branch as a model of its own (same weights, no `If`, no
    `use_cache_branch` input), for runtimes that call the with-past step many times: the `If`
    cost ~35 us a step here (docs/export.md), and top-level nodes only the no-past branch uses
    (int8 Whisper quantizes `encoder_hidden_states` there) are left out.

    Raises:
        OnnxFileError: the model is not an optimum merged decoder (one `If` on
            `use_cache_branch` whose then-branch is the with-past decoder).
    """
    top = merged.graph
    switch = [n for n in top.node if n.op_type == "If"]
    if len(switch) != 1 or switch[0].input[0] != "use_cache_branch":
        raise OnnxFileError("not an optimum merged decoder: expected one If on use_cache_branch")
    branch = next(a.g for a in switch[0].attribute if a.name == "then_branch")
    needed = {x for g in graphs(branch) for n in g.node for x in n.input}
    nodes: list[onnx.NodeProto] = []
    for node in reversed([n for n in top.node if n is not switch[0]]):  # producers first
        if any(o in needed for o in node.output):
            nodes.insert(0, node)
            needed.update(node.input)
    graph = helper.make_graph(
        nodes + list(branch.node),
        "decoder_with_past",
        [i for i in top.input if i.name in needed],
        list(branch.output),
        initializer=[i for i in top.initializer if i.name in needed],
    )
    return helper.make_model(graph, opset_imports=merged.opset_import, ir_version=merged.ir_version)


# ---------------------------------------------------------------------------- int8 compaction

# Float initializers at least this large (elements) that no quantizer touched (Conv weights,
# position tables added to the input) are stored as int8 + DequantizeLinear; below it the
# saving is a few KB and biases keep full precision.
_MIN_STORED_INT8 = 4096


def tied_tables(model: onnx.ModelProto) -> dict[str, str]:
    """{Gather table: MatMul weight} for embedding tables whose transpose is also a MatMul
    weight (GPT-2's wte and lm_head, Whisper's embed_tokens and proj_out): after
    `prepare_for_quantization` they are two initializers holding the same numbers."""
    inits = {i.name: i for i in model.graph.initializer}
    tables = {
        node.input[0]
        for graph in graphs(model.graph)
        for node in graph.node
        if node.op_type == "Gather" and node.input[0] in inits and _attr(node, "axis", 0) == 0
    }
    weights = {
        node.input[1]
        for graph in graphs(model.graph)
        for node in graph.node
        if node.op_type == "MatMul" and node.input[1] in inits
    }
    tied = {}
    for table in tables:
        array = numpy_helper.to_array(inits[table])
        for weight in weights:
            if tuple(inits[weight].dims) == array.shape[::-1] and np.array_equal(
                numpy_helper.to_array(inits[weight]), array.T
            ):
                tied[table] = weight
    return tied


def _name_gathers(model: onnx.ModelProto, tied: dict[str, str]) -> list[str]:
    """Names of the Gather nodes reading a tied table (named here where the export left them
    unnamed), for the quantizer's nodes_to_exclude."""
    names = []
    for graph in graphs(model.graph):
        for node in graph.node:
            if node.op_type == "Gather" and node.input[0] in tied:
                node.name = node.name or f"{graph.name}/gather_{node.input[0]}"
                names.append(node.name)
    return names


def compact_int8(model: onnx.ModelProto, tied: dict[str, str]) -> None:
    """Shrink a quantize_dynamic output in place, without changing what it computes beyond
    int8 rounding of the tables below.

    - A tied embedding table (`tied`: table -> MatMul weight) is dropped: its Gathers read
      rows of the MatMul's int8 weight (per output channel = per vocabulary row) and scale
      them, so the table is stored once, in int8.
    - Large float initializers left (Conv weights, position tables) become int8 with one
      symmetric scale per row and a DequantizeLinear; ORT does not fold DequantizeLinear, so
      it runs each call (microseconds for these sizes) and the op itself stays FP32.
    - value_info (shapes the quantizer inferred; ORT infers them again), doc strings and node
      names go, and intermediate tensors get short names (`_short_names`): on these small
      models names were a fifth of the merged decoder's bytes. Graph inputs, outputs and
      weight names are kept.

    Written here because ORT's quantizer keeps the table twice and has no weight-only int8
    for non-MatMul ops.

    Raises:
        OnnxFileError: a tied MatMul weight was not quantized symmetrically.
    """
    top = model.graph
    inits = {i.name: i for i in top.initializer}
    for table, weight in tied.items():
        _gather_from_int8_weight(model, table, weight, inits)
    consumers = _consumers(model)
    for init in list(top.initializer):
        ops = consumers.get(init.name, set())
        if (
            init.data_type == onnx.TensorProto.FLOAT
            and len(init.dims) >= 2
            and int(np.prod(init.dims)) >= _MIN_STORED_INT8
            and ops
            and ops <= {"Conv", "Add"}
        ):
            _store_int8(top, init)
    for graph in graphs(top):
        del graph.value_info[:]
        for node in graph.node:
            node.doc_string = ""
            node.name = ""
    _short_names(model)


def _short_names(model: onnx.ModelProto) -> None:
    """Rename every tensor that a node produces (subgraphs included) to `t<base 36 number>`,
    except the top graph's outputs; inputs and initializers are never node outputs."""
    keep = {o.name for o in model.graph.output}
    names: dict[str, str] = {}
    for graph in graphs(model.graph):
        for node in graph.node:
            for out in node.output:
                if out and out not in keep and out not in names:
                    names[out] = f"t{np.base_repr(len(names), 36).lower()}"
    for graph in graphs(model.graph):
        for node in graph.node:
            node.input[:] = [names.get(x, x) for x in node.input]
            node.output[:] = [names.get(x, x) for x in node.output]
        for out in graph.output:
            out.name = names.get(out.name, out.name)


def _consumers(model: onnx.ModelProto) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for graph in graphs(model.graph):
        for node in graph.node:
            for name in node.input:
                found.setdefault(name, set()).add(node.op_type)
    return found


def _store_int8(top: onnx.GraphProto, init: onnx.TensorProto) -> None:
    """Replace a float initializer by int8 + per-row scale + DequantizeLinear of its name."""
    array = numpy_helper.to_array(init)
    if not np.isfinite(array).all():
        return  # masks (-inf) would not survive int8
    axis = next(i for i, d in enumerate(array.shape) if d > 1)
    rows = np.moveaxis(array, axis, 0).reshape(array.shape[axis], -1)
    scale = np.abs(rows).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    shape = [1] * array.ndim
    shape[axis] = -1
    q = np.clip(np.rint(array / scale.reshape(shape)), -127, 127).astype(np.int8)
    name = init.name
    top.initializer.remove(init)
    top.initializer.extend(
        [
            numpy_helper.from_array(q, f"{name}_int8"),
            numpy_helper.from_array(scale.astype(np.float32), f"{name}_int8_scale"),
            numpy_helper.from_array(np.zeros_like(scale, dtype=np.int8), f"{name}_int8_zp"),
        ]
    )
    dq = helper.make_node(
        "DequantizeLinear",
        [f"{name}_int8", f"{name}_int8_scale", f"{name}_int8_zp"],
        [name],
        name=f"{name}_dequantize",
        axis=axis,
    )
    top.node.insert(0, dq)


def _gather_from_int8_weight(
    model: onnx.ModelProto, table: str, weight: str, inits: dict[str, onnx.TensorProto]
) -> None:
    """Gather(table, ids) -> Cast(Gather(W_q^T, ids)) * Gather(scale, ids)[..., None], where
    W_q (D, V) is the int8 MatMul weight and scale (V,) its per-column scale."""
    top = model.graph
    q, scale, zp = (f"{weight}_quantized", f"{weight}_scale", f"{weight}_zero_point")
    if q not in inits or scale not in inits:
        raise OnnxFileError(f"{weight} was not quantized by name ({q}): cannot share it")
    if zp in inits and numpy_helper.to_array(inits[zp]).any():
        raise OnnxFileError(f"{weight} has non-zero int8 zero points: cannot share it")
    per_row = len(inits[scale].dims) == 1
    rows = f"{table}_int8_rows"  # (V, D) int8: a Transpose of an initializer, folded by ORT
    top.node.insert(0, helper.make_node("Transpose", [q], [rows], name=rows, perm=[1, 0]))
    axes = f"{table}_last_axis"
    top.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), axes))
    for graph in graphs(top):
        nodes = []
        for node in graph.node:
            if node.op_type != "Gather" or node.input[0] != table:
                nodes.append(node)
                continue
            ids, out = node.input[1], node.output[0]
            tag = node.name or out
            nodes += [
                helper.make_node("Gather", [rows, ids], [f"{tag}_q"], name=f"{tag}_q"),
                helper.make_node("Cast", [f"{tag}_q"], [f"{tag}_f"], to=onnx.TensorProto.FLOAT),
            ]
            if per_row:  # one scale per vocabulary row: (B, T) -> (B, T, 1)
                nodes += [
                    helper.make_node("Gather", [scale, ids], [f"{tag}_s"], name=f"{tag}_s"),
                    helper.make_node("Unsqueeze", [f"{tag}_s", axes], [f"{tag}_s1"]),
                    helper.make_node("Mul", [f"{tag}_f", f"{tag}_s1"], [out], name=f"{tag}_m"),
                ]
            else:
                nodes.append(helper.make_node("Mul", [f"{tag}_f", scale], [out], name=tag))
        del graph.node[:]
        graph.node.extend(nodes)
    top.initializer.remove(inits.pop(table))


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


QAT_ABSENT = "not built: no QAT model yet"


def variant_names(cfg: Export) -> list[str]:
    """Every variant a track can have, in report order."""
    return ["fp32", *(f"{q}_{s}" for s in ("ptq", "qat") for q in cfg.quantize)]


def export_track(
    track: Any,
    cfg: Export,
    card: TrackExport,
    models: list[Source],
    out: Path,
) -> dict[str, Any]:
    """Export each source of `track` (a definition, sonfolio.tracks), quantize it into every
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
        weights = cpu.int8_weight_range(folder)
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
