"""Stage score_export: the score model as ONNX variants that optimum's ORTModel loads as is.

Run:    dvc repro score_export      (or: python -m tasks.score_export)
Reads:  params.yaml (export, score_export, paths), ${paths.score_model}/ (the FP32 model)
Writes: ${paths.score_export}/{fp32,int8_ptq,int4_ptq}/ (encoder_model.onnx,
        decoder_model_merged.onnx, configs, tokenizer, image processor, README.md model card),
        ${paths.metrics}/score_export.json (per variant: bytes per file and total, size ratio
        to FP32, FP32 MatMul weights left)

The QAT variants (int8_qat, int4_qat) come from ${paths.score_qat}/int8/ and int4/, the
score_qat stage's models (docs/export.md).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sonfolio.config import Export, TrackExport, load_params
from sonfolio.export import TrackSpec, export_track, sources
from sonfolio.io import write_json
from sonfolio.logs import setup_logging

log = logging.getLogger(__name__)

STAGE = "score_export"
TRACK = TrackSpec(
    task="image-to-text-with-past",
    ort_class="ORTModelForVision2Seq",
    pipeline_tag="image-to-text",
    title="Sonfolio score reader: staff system image to LilyPond",
    summary="A ViT encoder and a GPT-2 decoder that write one staff system as canonical "
    "LilyPond text, exported to ONNX with its KV cache (merged decoder).",
    data="rendered staff systems of music21 corpus pieces (essenFolksong, bach) plus "
    "synthetic systems, canonical LilyPond text (docs/canonical-lilypond.md)",
    train_stage="score_train",
    export_stage=STAGE,
    bench_stage="score_bench",
)


def run(
    cfg: Export,
    card: TrackExport,
    fp32_model: Path,
    qat_model: Path | None,
    out: Path,
    metrics_path: Path,
) -> dict[str, Any]:
    """Export `fp32_model` (and the QAT model(s) under `qat_model` when given: one folder per
    scheme, int8/ and int4/, or one HF folder) into the variant folders under `out`.

    Raises:
        OnnxFileError: an export wrote no merged decoder, or an int8 file kept FP32 weights.
    """
    metrics = export_track(TRACK, cfg, card, sources(cfg, fp32_model, qat_model), out)
    metrics["torch_fp32_bytes"] = sum(f.stat().st_size for f in fp32_model.glob("*.safetensors"))
    write_json(metrics_path, metrics)
    log.info(
        "%s: %s",
        STAGE,
        {k: v.get("bytes", v.get("status")) for k, v in metrics.items() if isinstance(v, dict)},
    )
    return metrics


def main() -> None:
    setup_logging()
    params = load_params()
    paths = params.paths
    run(
        params.export,
        params.score_export,
        paths.score_model,
        paths.score_qat,  # one QAT-trained model per scheme: int8/, int4/
        paths.score_export,
        paths.metrics / f"{STAGE}.json",
    )


if __name__ == "__main__":
    main()
