"""The params sections `export` and `<track>_export`, and what the export stage reads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sonfolio.config.base import Strict
from sonfolio.config.sections import Sections


class Export(Strict):
    """ONNX export and ORT quantization, shared by every track's export (export@score, ...)."""

    opset: Annotated[int, Field(ge=14, le=21)]  # ONNX opset of the export
    quantize: list[Literal["int8", "int4"]]  # variants made from each exported model
    per_channel: bool  # int8: one scale per output channel (else per tensor)
    # int8 weights within [-64, 64] (7) or [-127, 127] (8); 8 saturates on x86 without VNNI
    int8_weight_bits: Literal[7, 8]
    int4_block_size: Literal[16, 32, 64, 128, 256]  # int4: weights per scale (along K)
    int4_symmetric: bool  # int4: no zero point
    int4_accuracy_level: Literal[0, 1, 2, 3, 4]  # MatMulNBits compute type; 4: int8 (fastest)


class TrackExport(Strict):
    """What the model card and the upload command of one track say."""

    hub_repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]
    license: Annotated[str, Field(min_length=1)]
    language: list[str]  # ISO codes for the card; [] for none


class ExportParams(Sections):
    """What stage export reads: `export` and `<track>_export`."""

    export: Export
    score_export: TrackExport
    speech_export: TrackExport
