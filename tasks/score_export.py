"""Stage score_export: the score model as ONNX variants that optimum's ORTModel loads as is.

Run:    dvc repro score_export      (or: python -m tasks.score_export)
Reads:  params.yaml (export, score_export, paths), ${paths.track("score").model}/ (the FP32 model)
Writes: ${paths.track("score").export}/{fp32,int8_ptq,int4_ptq}/ (encoder_model.onnx,
        decoder_model_merged.onnx, configs, tokenizer, image processor, README.md model card),
        ${paths.metrics}/score_export.json (per variant: bytes per file and total, size ratio
        to FP32, FP32 MatMul weights left)

The QAT variants (int8_qat, int4_qat) come from ${paths.track("score").qat}/int8/ and int4/, the
score_qat stage's models (docs/export.md).
"""

from __future__ import annotations

from sonfolio.export import TrackSpec, stage_main
from sonfolio.logs import setup_logging

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


def main() -> None:
    setup_logging()
    stage_main(TRACK)


if __name__ == "__main__":
    main()
