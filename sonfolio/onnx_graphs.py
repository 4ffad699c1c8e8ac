"""Walking an ONNX graph with the subgraphs nested in its If / Loop / Scan nodes."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


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
