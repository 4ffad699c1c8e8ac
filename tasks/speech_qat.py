"""Stage speech_qat: quantization-aware fine-tuning of the trained speech model, per scheme.

Run:    dvc repro speech_qat      (or: python -m tasks.speech_qat)
Reads:  params.yaml (speech_qat, speech_train, train_engine, train_presets,
        export.int8_weight_bits, paths),
        ${paths.track("speech").model}/ (the FP32 model), ${paths.track("speech").data}/,
        ${paths.track("speech").tokenizer}/
Writes: ${paths.track("speech").qat}/<scheme>/ (int8/, int4/: WhisperForConditionalGeneration
        .save_pretrained with the QAT-trained weights, fake quantization stripped, + tokenizer
        + feature extractor), ${paths.metrics}/speech_qat.json,
        ${paths.live}/speech_qat/<scheme>/; resumable checkpoints under
        ${paths.checkpoints}/speech_qat/ (removed on success)

The data is read as speech_train reads it (its make_track); speech_qat's params say how the
fine-tune runs (sonfolio/qat.py).
"""

from __future__ import annotations

from transformers import WhisperForConditionalGeneration

from sonfolio import qat
from sonfolio.config import load_params
from sonfolio.logs import setup_logging
from sonfolio.speech.track import make_track

STAGE = "speech_qat"


def main() -> None:
    setup_logging()
    params = load_params()
    paths, cfg = params.paths, params.speech_qat
    data, processor = paths.track("speech").data, paths.track("speech").tokenizer
    qat.run_stage(
        STAGE,
        cfg,
        params.engine_options(cfg.preset),
        lambda folder: WhisperForConditionalGeneration.from_pretrained(str(folder)),
        paths.track("speech").model,
        lambda m: make_track(params.speech_train, data, processor, model=m, name=STAGE)[0],
        [data / "manifest.jsonl", *sorted(processor.glob("*.json"))],
        paths.track("speech").qat,
        paths.metrics / "speech_qat.json",
        paths.checkpoints,
        paths.live / STAGE,
        params.export.int8_weight_bits,  # train for the grid the export quantizes to
    )


if __name__ == "__main__":
    main()
