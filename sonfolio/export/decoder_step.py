"""One decoder for every step of the greedy loop (sonfolio.infer.ortloop), its with-past
branch made cheaper: written once by the export (`write_fused`: decoder_fused_model.onnx
beside optimum's files) so that opening a model does no graph surgery.

`joint_decoder` is optimum's merged decoder with its with-past branch replaced by the step
below, so that one ORT session (one copy of the weights) runs the first step and the rest.

`fuse_self_attention` turns each self-attention block of the with-past decoder
(sonfolio.export.with_past) into one com.microsoft MultiHeadAttention node. A whisper-base
step runs ~400 ONNX nodes; about 250 of them are the shape work around the weight MatMuls
(per layer: the Reshape / Transpose / Concat of the new key and value onto the past, the
causal mask rebuilt from the past length, the Mul / MatMul / Add / Softmax / IsNaN / Where
of the scores), each a kernel launch for a few KB at batch 1. ONNX Runtime's own fusion
(onnxruntime.transformers.optimizer, model type bart) fuses none of optimum's export of
these decoders, so the blocks are matched here by what they compute. The cross-attention
is left as it is: fused the same way, it ran slower (docs/export.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sonfolio.onnx_graphs import graphs

MS_DOMAIN = "com.microsoft"
_HEADS_FIRST = [0, 2, 1, 3]  # (B, S, heads, size) <-> (B, heads, S, size)
_KEY_T = [0, 1, 3, 2]  # (B, heads, T, size) -> (B, heads, size, T)
_STEP_INPUT = re.compile(r"input_ids|encoder_hidden_states|past_key_values(\.\w+)+")


class _Graph:
    """Producers, consumers and constant values of one graph's tensors."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.inits = {i.name: i for i in graph.initializer}
        self.outputs = {o.name for o in graph.output}

    def const(self, name: str) -> np.ndarray | None:
        """The value of a tensor set by an initializer or a Constant node, else None."""
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def through_scalars(self, name: str) -> tuple[str, float]:
        """Walks up from `name` through Muls by a one-value constant: the tensor before them
        and the product of the constants."""
        scale = 1.0
        while (node := self.producer.get(name)) is not None and node.op_type == "Mul":
            values = [self.const(i) for i in node.input]
            if len(values) != 2 or not any(v is not None and v.size == 1 for v in values):
                break
            mine = 0 if values[1] is not None and values[1].size == 1 else 1
            scale *= float(values[1 - mine].reshape(()))  # type: ignore[union-attr]
            name = node.input[mine]
        return name, scale

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in self.outputs else None


def _perm(node: onnx.NodeProto | None) -> list[int] | None:
    if node is None or node.op_type != "Transpose":
        return None
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _split_heads(g: _Graph, name: str) -> tuple[str, float] | None:
    """From a (B, heads, S, size) tensor up through scalar Muls, the heads-first Transpose,
    the Reshape that splits heads and scalar Muls again, to the (B, S, hidden) tensor before
    them. Returns that tensor and the product of the scalars met."""
    name, scale = g.through_scalars(name)
    node = g.producer.get(name)
    if _perm(node) != _HEADS_FIRST:
        return None
    node = g.producer.get(node.input[0])  # type: ignore[union-attr]
    if node is None or node.op_type != "Reshape":
        return None
    name, more = g.through_scalars(node.input[0])
    return name, scale * more


@dataclass
class _Block:
    """A matched self-attention block: what the fused node reads and writes."""

    query: str  # (B, S, hidden), before any scaling
    key: str  # the new key and value, (B, S, hidden)
    value: str
    past: tuple[str, str]  # (B, heads, P, size) inputs
    present: tuple[str, str]  # (B, heads, P + S, size) outputs
    output: str  # (B, S, hidden), heads merged
    scale: float


def _self_attention(g: _Graph, value_matmul: onnx.NodeProto) -> _Block | None:
    """The self-attention block whose probabilities x value MatMul this is, when it is one:
    scores = (q * a) x Transpose(Concat(past key, new key)) * b, plus a mask, Softmax on the
    last axis (optionally guarded by IsNaN / Where), x Concat(past value, new value), heads
    merged back by Transpose and Reshape. Anything else: None."""
    concat_v = g.producer.get(value_matmul.input[1])
    merge = g.only_consumer(value_matmul.output[0])
    if concat_v is None or concat_v.op_type != "Concat" or _perm(merge) != _HEADS_FIRST:
        return None
    reshape = g.only_consumer(merge.output[0])  # type: ignore[union-attr]
    if reshape is None or reshape.op_type != "Reshape":
        return None
    probs = g.producer.get(value_matmul.input[0])
    if probs is not None and probs.op_type == "Where":  # the IsNaN guard
        guard = g.producer.get(probs.input[0])
        if guard is None or guard.op_type != "IsNaN":
            return None
        softmax = g.producer.get(probs.input[2])
        if softmax is None or guard.input[0] != softmax.output[0]:
            return None
    else:
        softmax = probs
    if softmax is None or softmax.op_type != "Softmax":
        return None
    if next((a.i for a in softmax.attribute if a.name == "axis"), -1) not in (-1, 3):
        return None
    add = g.producer.get(softmax.input[0])  # scores + mask
    if add is None or add.op_type != "Add":
        return None
    scores = next(
        (g.producer[i] for i in add.input if i in g.producer and g.producer[i].op_type == "MatMul"),
        None,
    )
    if scores is None:
        return None
    query = _split_heads(g, scores.input[0])
    key_t, key_scale = g.through_scalars(scores.input[1])
    transpose = g.producer.get(key_t)
    if query is None or _perm(transpose) != _KEY_T:
        return None
    concat_k = g.producer.get(transpose.input[0])  # type: ignore[union-attr]
    if concat_k is None or concat_k.op_type != "Concat":
        return None
    for concat in (concat_k, concat_v):
        if len(concat.input) != 2 or any(
            a.name == "axis" and a.i not in (-2, 2) for a in concat.attribute
        ):
            return None
    new_k, new_v = _split_heads(g, concat_k.input[1]), _split_heads(g, concat_v.input[1])
    if new_k is None or new_v is None or new_k[1] != 1.0 or new_v[1] != 1.0:
        return None
    return _Block(
        query=query[0],
        key=new_k[0],
        value=new_v[0],
        past=(concat_k.input[0], concat_v.input[0]),
        present=(concat_k.output[0], concat_v.output[0]),
        output=reshape.output[0],
        scale=query[1] * key_scale,
    )


def fuse_self_attention(model: onnx.ModelProto, heads: int) -> tuple[onnx.ModelProto, int]:
    """The model with each self-attention block of its main graph that matches
    (`_self_attention`) replaced by one MultiHeadAttention node of `heads` heads
    (`unidirectional`: the causal mask, for any number of new tokens), nodes left without a
    use dropped. Returns the new model and the number of blocks fused (0: `model` itself;
    also when the decoder reads any input but the token ids, the encoder's output and the
    past keys / values, such as an attention mask)."""
    # the mask dropped with a block must be the causal one alone: no padding mask may come in
    if any(not _STEP_INPUT.fullmatch(i.name) for i in model.graph.input):
        return model, 0
    g = _Graph(model.graph)
    blocks = [
        block
        for node in model.graph.node
        if node.op_type == "MatMul" and (block := _self_attention(g, node)) is not None
    ]
    if not blocks:
        return model, 0
    fused = [
        helper.make_node(
            "MultiHeadAttention",
            [b.query, b.key, b.value, "", "", "", *b.past],
            [b.output, *b.present],
            name=f"fused_self_attention_{i}",
            domain=MS_DOMAIN,
            num_heads=heads,
            scale=b.scale,
            unidirectional=1,
        )
        for i, b in enumerate(blocks)
    ]
    replaced = {o for b in blocks for o in (b.output, *b.present)}
    nodes = [n for n in model.graph.node if not replaced.intersection(n.output)] + fused
    sources = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    return _with_nodes(model, _live(_ordered(nodes, sources), model.graph.output)), len(blocks)


def _with_nodes(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    outputs: list[onnx.ValueInfoProto] | None = None,
    inputs: list[onnx.ValueInfoProto] | None = None,
) -> onnx.ModelProto:
    """A copy of `model` holding `nodes`, the inputs and initializers they read, and
    `outputs` (default: the model's)."""
    used = {x for n in nodes for x in n.input}
    graph = helper.make_graph(
        nodes,
        model.graph.name,
        [i for i in (inputs or model.graph.input) if inputs or i.name in used],
        list(outputs or model.graph.output),
        initializer=[i for i in model.graph.initializer if i.name in used],
    )
    opsets = list(model.opset_import)
    if any(n.domain == MS_DOMAIN for n in nodes) and all(o.domain != MS_DOMAIN for o in opsets):
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=model.ir_version)


def _live(nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto]) -> list[onnx.NodeProto]:
    """The nodes (in graph order) that an output depends on."""
    needed, keep = {o.name for o in outputs}, []
    for node in reversed(nodes):
        if needed.intersection(node.output):
            keep.append(node)
            needed.update(node.input)
    return keep[::-1]


def _ordered(nodes: list[onnx.NodeProto], sources: set[str]) -> list[onnx.NodeProto]:
    """The nodes in an order where each comes after its inputs' producers (ONNX requires it;
    the fused nodes were appended at the end).

    Raises:
        ValueError: a node reads a tensor that nothing produces (a bug of the rewrite).
    """
    ready, order, waiting = set(sources) | {""}, [], list(nodes)
    while waiting:
        rest = []
        for node in waiting:
            if all(i in ready for i in node.input):
                order.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(waiting):
            raise ValueError(f"the rewritten decoder reads unproduced tensors: {rest[0].input}")
        waiting = rest
    return order


def step_graph(merged: onnx.ModelProto, fuse: bool = True) -> onnx.ModelProto:
    """The with-past step of a merged decoder (sonfolio.export.with_past), its self-attention
    fused into MultiHeadAttention nodes when `fuse` and the past has a static head count.

    Raises:
        OnnxFileError: `merged` is not an optimum merged decoder.
    """
    from sonfolio.export.with_past import with_past_decoder

    step = with_past_decoder(merged)
    past = [i for i in merged.graph.input if i.name.startswith("past_key_values")]
    heads = past[0].type.tensor_type.shape.dim[1].dim_value if past else 0
    if fuse and heads > 0:  # 0: not a static dimension
        step, _ = fuse_self_attention(step, heads)
    return step


def joint_decoder(merged: onnx.ModelProto, fuse: bool = True) -> onnx.ModelProto:
    """One decoder for the first step and the later ones: `merged` with its with-past branch
    (the `If`'s then-branch) replaced by `step_graph`'s step, so a runtime holds the weights
    once. The first step still runs the no-past branch as exported (use_cache_branch false);
    a later step pays the `If` (~35 us, docs/export.md) and runs what the step model runs.

    Top-level nodes that the with-past branch does not read move into the no-past branch
    (int8: the quantization of encoder_hidden_states, which only the first step's
    cross-attention uses), so that a later step does not run them; nodes and initializers
    that nothing reads any more (the fusion's leftovers) are dropped.

    `merged` is rewritten in place and returned: a copy would hold its weights twice.

    Raises:
        OnnxFileError: `merged` is not an optimum merged decoder.
    """
    step = step_graph(merged, fuse)  # raises for a model that is not a merged decoder
    top = merged.graph
    switch = next(n for n in top.node if n.op_type == "If")
    outer = [n for n in top.node if n.op_type != "If"]  # step_graph checked: one If
    on_top = {o for n in outer for o in n.output}
    branches = {a.name: a.g for a in switch.attribute}
    old = branches["then_branch"]
    with_past = helper.make_graph(
        [n for n in step.graph.node if not on_top.intersection(n.output)],
        old.name,
        [],
        list(old.output),
    )
    del step  # its copy of the weights
    branches["then_branch"].CopyFrom(with_past)
    no_past = branches["else_branch"]
    later = _upstream(outer, _reads(with_past) | {*switch.input, *(o.name for o in top.output)})
    first = _upstream(outer, _reads(no_past)) - later
    _replace(no_past.node, [*(outer[i] for i in sorted(first)), *no_past.node])
    _replace(top.node, [*(outer[i] for i in sorted(later)), switch])
    used = {x for g in graphs(top) for n in g.node for x in n.input}
    for i in reversed(range(len(top.initializer))):
        if top.initializer[i].name not in used:
            del top.initializer[i]
    uses_ms = any(n.domain == MS_DOMAIN for g in graphs(top) for n in g.node)
    if uses_ms and all(o.domain != MS_DOMAIN for o in merged.opset_import):
        merged.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return merged


def _reads(graph: onnx.GraphProto) -> set[str]:
    """The tensors the nodes of `graph` and its subgraphs read."""
    return {x for g in graphs(graph) for n in g.node for x in n.input}


def _upstream(nodes: list[onnx.NodeProto], names: set[str]) -> set[int]:
    """The indices of the nodes (in graph order) that the tensors `names` depend on."""
    needed, found = set(names), set()
    for i in reversed(range(len(nodes))):
        if needed.intersection(nodes[i].output):
            found.add(i)
            needed.update(nodes[i].input)
    return found


def _replace(field: Any, nodes: list[onnx.NodeProto]) -> None:
    """Set a graph's repeated `node` field to `nodes`, which may be its own elements (copied
    before the field is cleared)."""
    copies = []
    for node in nodes:
        copies.append(onnx.NodeProto())
        copies[-1].CopyFrom(node)
    del field[:]
    field.extend(copies)


# ONNX Runtime writes an optimized model inline only below protobuf's 2 GB: past this the
# joint graph is written as it is (ORT then optimizes it at every opening)
PREOPTIMIZE_MAX_BYTES = 1_500_000_000


def write_fused(folder: Path) -> Path | None:
    """Write `joint_decoder` of the folder's merged decoder, its self-attention fused, as
    DECODER_FUSED beside it: checked by onnx's checker, then saved as ONNX Runtime's
    CPU-optimized graph (ORT_ENABLE_EXTENDED: constants folded, int8 matmuls fused; portable
    across CPUs, unlike the layout optimizations of ORT_ENABLE_ALL, which the loop still runs
    at opening). Opening it then skips that work: whisper-base int8's decoder opens in ~1.0 s
    instead of ~1.7 s on 2 loaded cores, with the same tokens (docs/export.md). The loop is
    the only reader, and runs on the CPU. None (nothing written) for a folder with no merged
    decoder.

    Raises:
        OnnxFileError: the merged decoder is not optimum's, or the result does not check.
    """
    from sonfolio.export.layout import DECODER, DECODER_FUSED, check_onnx, load_onnx

    if not (folder / DECODER).is_file():
        return None
    joint = joint_decoder(load_onnx(folder / DECODER))
    out = folder / DECODER_FUSED
    plain = out.with_name(f".{out.stem}.plain.onnx")
    onnx.save(joint, str(plain))
    del joint
    check_onnx(plain)
    if plain.stat().st_size > PREOPTIMIZE_MAX_BYTES:
        plain.replace(out)
        return out
    _optimized(plain, out)
    plain.unlink()
    return out


def _optimized(source: Path, out: Path) -> None:
    """ONNX Runtime's CPU graph optimizations of `source`, written to `out`."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(out)
    options.intra_op_num_threads = 1
    onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
