"""The merged decoder's with-past branch cut out as a model of its own, for the greedy loop."""

from __future__ import annotations

import onnx
from onnx import helper

from sonfolio.export.layout import OnnxFileError
from sonfolio.onnx_graphs import graphs


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
