"""int8 dynamic quantization of a variant folder (ORT quantize_dynamic), then `compact_int8`.

MatMul weights int8 (per channel by param; 7-bit within [-64, 64] or 8-bit by
`export.int8_weight_bits`, ORT's reduce_range), activations quantized at run time,
`EnableSubgraph` so the merged decoder's branches are quantized too (without it they stay
FP32). `compact_int8` then stores a tied embedding once in int8, stores Conv weights and
position tables int8, and drops value_info and long tensor names.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sonfolio.export.layout import ONNX_FILES, OnnxFileError, copy_companions, load_onnx
from sonfolio.export.prepare import attribute, prepare_for_quantization
from sonfolio.onnx_graphs import graphs

if TYPE_CHECKING:
    from sonfolio.config.export import Export


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


# ---------------------------------------------------------------------------- int8 compaction

# Float initializers that no quantizer touched are stored as int8 + DequantizeLinear: every
# Conv weight (the conv score encoder's are mostly small: a depthwise 3x3 is 9 values a
# channel), and position tables added to the input when at least this large (elements): below
# it the saving is a few KB. Biases (1-D) keep full precision.
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
        if node.op_type == "Gather" and node.input[0] in inits and attribute(node, "axis", 0) == 0
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
    - Conv weights and large float position tables left become int8 with one
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
            and ops
            and ops <= {"Conv", "Add"}
            and (ops == {"Conv"} or int(np.prod(init.dims)) >= _MIN_STORED_INT8)
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
    """Gather(table, ids) -> Cast(rows of W_q^T at ids) * Gather(scale, ids)[..., None], where
    W_q (D, V) is the int8 MatMul weight and scale (V,) its per-column scale.

    The rows are W_q's columns, gathered on its axis 1 and turned (a few tokens' worth):
    a Transpose of the whole W_q would be constant-folded by ORT into a second (V, D) copy,
    in memory and in any file ORT saves optimized (whisper-base: +25 MB of 75)."""
    top = model.graph
    q, scale, zp = (f"{weight}_quantized", f"{weight}_scale", f"{weight}_zero_point")
    if q not in inits or scale not in inits:
        raise OnnxFileError(f"{weight} was not quantized by name ({q}): cannot share it")
    if zp in inits and numpy_helper.to_array(inits[zp]).any():
        raise OnnxFileError(f"{weight} has non-zero int8 zero points: cannot share it")
    per_row = len(inits[scale].dims) == 1
    axes, flat, width = f"{table}_last_axis", f"{table}_flat", f"{table}_width"
    top.initializer.extend(
        [
            numpy_helper.from_array(np.array([-1], np.int64), axes),
            numpy_helper.from_array(np.array([-1], np.int64), flat),
            numpy_helper.from_array(np.array(inits[q].dims[:1], np.int64), width),
        ]
    )
    for graph in graphs(top):
        nodes = []
        for node in graph.node:
            if node.op_type != "Gather" or node.input[0] != table:
                nodes.append(node)
                continue
            ids, out = node.input[1], node.output[0]
            tag = node.name or out
            nodes += [  # ids (...) -> (N,) -> W_q[:, ids] (D, N) -> (N, D) -> (..., D)
                helper.make_node("Reshape", [ids, flat], [f"{tag}_ids"]),
                helper.make_node("Gather", [q, f"{tag}_ids"], [f"{tag}_cols"], axis=1),
                helper.make_node("Transpose", [f"{tag}_cols"], [f"{tag}_rows"], perm=[1, 0]),
                helper.make_node("Shape", [ids], [f"{tag}_ids_shape"]),
                helper.make_node("Concat", [f"{tag}_ids_shape", width], [f"{tag}_shape"], axis=0),
                helper.make_node("Reshape", [f"{tag}_rows", f"{tag}_shape"], [f"{tag}_q"]),
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
