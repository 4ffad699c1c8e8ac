"""The FP32 ONNX export: optimum-onnx's main_export with past key/values, plus a CTC head.

optimum writes the encoder, the merged decoder (one decoder for the first step and the steps
with past key/values, switched by an `If` node) and the unmerged pair; the unmerged files are
dropped, since ORTModel loads the merged one. A model that reads with its CTC head
(sonfolio.train.ctc) gets the head in its encoder graph, as the output `ctc_logits`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sonfolio.ctc_format import CTC_OUTPUT, DECODING, HEAD_FILE, folder_decoding
from sonfolio.export.layout import ENCODER, ONNX_FILES, UNMERGED, OnnxFileError, load_onnx

if TYPE_CHECKING:
    from sonfolio.config.export import Export


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
