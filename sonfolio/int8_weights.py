"""The int8 MatMul weights of an exported ONNX folder, and what they mean on a CPU: 7-bit weights
never saturate; 8-bit ones do where ONNX Runtime's int8 MatMul has no VNNI, AMX or ARM dot
product (sonfolio.cpu says which CPU this is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sonfolio.cpu import SAFE_INT8_WEIGHT, saturates, summary
from sonfolio.export.layout import DERIVED


def int8_weight_range(folder: Path) -> dict[str, Any] | None:
    """The int8 MatMul weights of an ONNX variant folder: {"max_abs", "bits", "signed",
    "matmuls"} over every `*.onnx` file, subgraphs included; None when it has no int8 MatMul.

    `bits` is 7 when every signed weight lies within [-64, 64] (no saturation on any CPU),
    else 8. Unsigned (u8 x u8) weights do not saturate either: `signed` False.
    """
    import onnx
    from onnx import numpy_helper

    from sonfolio.onnx_graphs import graphs

    max_abs, signed, count = 0, True, 0
    # the fused decoder (DERIVED) holds the merged decoder's weights again
    for path in sorted(p for p in folder.glob("*.onnx") if p.name not in DERIVED):
        model = onnx.load(str(path))
        inits = {i.name: i for g in graphs(model.graph) for i in g.initializer}
        for graph in graphs(model.graph):
            for node in graph.node:
                if node.op_type not in ("MatMulInteger", "DynamicQuantizeMatMul"):
                    continue
                weight = inits.get(node.input[1])
                if weight is None:
                    continue
                array = numpy_helper.to_array(weight)
                count += 1
                if array.dtype == np.uint8:
                    signed = False
                    continue
                max_abs = max(max_abs, int(np.abs(array.astype(np.int16)).max(initial=0)))
    if not count:
        return None
    bits = 7 if max_abs <= SAFE_INT8_WEIGHT else 8
    return {"max_abs": max_abs, "bits": bits, "signed": signed, "matmuls": count}


def int8_warning(folder: Path, cpu: dict[str, Any]) -> str | None:
    """Why the int8 model in `folder` loses accuracy on `cpu`, or None when it does not."""
    found = int8_weight_range(folder)
    if not found or not found["signed"] or found["bits"] == 7 or not saturates(cpu):
        return None
    return (
        f"{folder}: int8 weights reach {found['max_abs']} (8-bit), and this CPU "
        f"({summary(cpu)}) has no VNNI or AMX, so ONNX Runtime's int8 MatMul saturates on it "
        "and the model reads worse than it measured where it was exported; re-export with "
        "export.int8_weight_bits: 7 (dvc repro the export stage)"
    )
