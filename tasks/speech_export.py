"""Stage speech_export: the speech model as ONNX variants that optimum's ORTModel loads as is.

Run:    dvc repro speech_export      (or: python -m tasks.speech_export)
Reads:  params.yaml (export, speech_export, paths), ${paths.track("speech").model}/ (the FP32 model)
Writes: ${paths.track("speech").export}/{fp32,int8_ptq,int4_ptq}/ (encoder_model.onnx,
        decoder_model_merged.onnx, configs, tokenizer, feature extractor, README.md model card),
        ${paths.metrics}/speech_export.json (per variant: bytes per file and total, size ratio
        to FP32, FP32 MatMul weights left)

The QAT variants (int8_qat, int4_qat) come from ${paths.track("speech").qat}/int8/ and int4/, the
speech_qat stage's models (docs/export.md).
"""

from __future__ import annotations

from sonfolio.export import TrackSpec, stage_main
from sonfolio.logs import setup_logging

STAGE = "speech_export"
TRACK = TrackSpec(
    task="automatic-speech-recognition-with-past",
    ort_class="ORTModelForSpeechSeq2Seq",
    pipeline_tag="automatic-speech-recognition",
    title="Sonfolio French speech recognition (Whisper architecture)",
    summary="A small Whisper trained from scratch on French speech, exported to ONNX with its "
    "KV cache (merged decoder).",
    data="French sentences spoken by espeak-ng voices (synthetic), or the hub corpus set in "
    "params.yaml speech_data.hub (docs/speech.md)",
    train_stage="speech_train",
    export_stage=STAGE,
    bench_stage="speech_bench",
)


def main() -> None:
    setup_logging()
    stage_main(TRACK)


if __name__ == "__main__":
    main()
