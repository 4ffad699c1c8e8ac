"""The weight check: which MatMul / Gemm weights of an exported graph are still stored FP32."""

from __future__ import annotations

from pathlib import Path

import onnx

from sonfolio.export.layout import ONNX_FILES, load_onnx

WEIGHT_OPS = ("MatMul", "Gemm")
# What the quantizers turn them into (int8 dynamic, int8 QOperator, int4 weight-only).
QUANTIZED_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul", "MatMulNBits")
# Nodes that pass a weight through unchanged in value (a folded or dequantized weight is no
# longer FP32-stored, so DequantizeLinear is deliberately not in this list).
_PASS_THROUGH = ("Transpose", "Identity", "Cast", "Reshape")


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


def weight_check(folder: Path) -> dict[str, dict[str, int]]:
    """fp32_weight_matmuls per ONNX file (see fp32_weight_matmuls)."""
    return {name: fp32_weight_matmuls(load_onnx(folder / name)) for name in ONNX_FILES}
