"""int4 weight-only quantization of a variant folder (ORT's MatMulNBits, block-wise)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sonfolio.export.layout import ONNX_FILES, copy_companions, load_onnx
from sonfolio.export.prepare import prepare_for_quantization

if TYPE_CHECKING:
    from sonfolio.config.export import Export


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
