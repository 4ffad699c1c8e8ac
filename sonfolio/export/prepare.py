"""Graph preparation for the quantizers: every constant MatMul weight made an initializer."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sonfolio.onnx_graphs import graphs


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


def attribute(node: onnx.NodeProto, name: str, default: float) -> float:
    """The value of `node`'s attribute `name`, or `default` where the node has none."""
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _gemm_to_matmul(
    graph: onnx.GraphProto, top: onnx.GraphProto, inits: dict[str, onnx.TensorProto]
) -> None:
    """Gemm(A, W, C) with constant W, alpha = beta = 1, transA = 0 -> MatMul(A, W') + C."""
    nodes = []
    for node in graph.node:
        plain = attribute(node, "alpha", 1.0) == 1.0 and attribute(node, "beta", 1.0) == 1.0
        if (
            node.op_type != "Gemm"
            or node.input[1] not in inits
            or not plain
            or attribute(node, "transA", 0)
        ):
            nodes.append(node)
            continue
        weight = node.input[1]
        if attribute(node, "transB", 0):
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
