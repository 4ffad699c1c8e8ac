"""Stage export: a track's model as ONNX variants that optimum's ORTModel loads as is.

Run:    dvc repro export      (every track: export@score, export@speech; or
        python -m tasks.export score)
Reads:  params.yaml (export, <track>_export, paths), ${paths.tracks.<track>.model}/ (the FP32
        model), ${paths.tracks.<track>.qat}/int8/ and int4/ (the qat stage's models)
Writes: ${paths.tracks.<track>.export}/{fp32,int8_ptq,int4_ptq,int8_qat,int4_qat}/
        (encoder_model.onnx, decoder_model_merged.onnx, configs, tokenizer, image processor or
        feature extractor, README.md model card), ${paths.metrics}/<track>_export.json (per
        variant: bytes per file and total, size ratio to FP32, FP32 MatMul weights left)

The QAT variants (int8_qat, int4_qat) are built once the qat stage has written its models
(docs/export.md). What differs between tracks (optimum's export task, the model card's texts)
the track's face says; the routes are sonfolio.export's.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from sonfolio import tracks
from sonfolio.config.export import Export, ExportParams, TrackExport
from sonfolio.config.stage import load_sections
from sonfolio.export.run import export_track, sources
from sonfolio.io import write_json
from sonfolio.logs import setup_logging

log = logging.getLogger(__name__)


def run(
    track: Any,
    cfg: Export,
    card: TrackExport,
    fp32_model: Path,
    qat_model: Path | None,
    out: Path,
    metrics_path: Path,
) -> dict[str, Any]:
    """Export `fp32_model` of `track` (its face, sonfolio.tracks.face), and the QAT model(s)
    under `qat_model` when given (one folder per scheme, int8/ and int4/, or one HF folder),
    into the variant folders under `out`; write and return the metrics.

    Raises:
        FileNotFoundError: `qat_model` holds no QAT model.
        OnnxFileError (sonfolio.export.layout): an export wrote no merged decoder, or an int8 file
            kept FP32 weights.
    """
    metrics = export_track(track, cfg, card, sources(cfg, fp32_model, qat_model), out)
    metrics["torch_fp32_bytes"] = sum(f.stat().st_size for f in fp32_model.glob("*.safetensors"))
    write_json(metrics_path, metrics)
    log.info(
        "export@%s: %s",
        track.name,
        {k: v.get("bytes", v.get("status")) for k, v in metrics.items() if isinstance(v, dict)},
    )
    return metrics


def main() -> None:
    setup_logging()
    name = tracks.from_argv(sys.argv[1:], "export")
    params = load_sections(ExportParams)
    paths = params.paths.track(name)
    run(
        tracks.face(name, "export"),
        params.export,
        params.section(name, "export"),
        paths.model,
        paths.qat,  # one QAT-trained model per scheme: int8/, int4/
        paths.export,
        params.paths.metrics / f"{name}_export.json",
    )


if __name__ == "__main__":
    main()
