"""Stage score_qat: quantization-aware fine-tuning of the trained score model, per scheme.

Run:    dvc repro score_qat      (or: python -m tasks.score_qat)
Reads:  params.yaml (score_qat, score_train, train_engine, train_presets,
        score_data.image_long_side, export.int8_weight_bits, paths),
        ${paths.track("score").model}/ (the FP32 model), ${paths.track("score").data}/, ${paths.track("score").tokenizer}/
Writes: ${paths.track("score").qat}/<scheme>/ (int8/, int4/: VisionEncoderDecoderModel.save_pretrained
        with the QAT-trained weights, fake quantization stripped, + tokenizer + image
        processor), ${paths.metrics}/score_qat.json, ${paths.live}/score_qat/<scheme>/;
        resumable checkpoints under ${paths.checkpoints}/score_qat/ (removed on success)

The data is read as score_train reads it (its make_track); score_qat's params say how the
fine-tune runs (sonfolio/qat.py).
"""

from __future__ import annotations

from sonfolio import qat
from sonfolio.config import load_params
from sonfolio.logs import setup_logging
from sonfolio.score.model import load_trained
from sonfolio.score.track import make_track

STAGE = "score_qat"


def main() -> None:
    setup_logging()
    params = load_params()
    paths, cfg = params.paths, params.score_qat
    data, tokenizer, width = (
        paths.track("score").data,
        paths.track("score").tokenizer,
        params.score_data.image_long_side,
    )
    qat.run_stage(
        STAGE,
        cfg,
        params.engine_options(cfg.preset),
        load_trained,
        paths.track("score").model,
        lambda m: make_track(params.score_train, data, tokenizer, width, model=m, name=STAGE)[0],
        [data / "manifest.jsonl", *sorted(tokenizer.glob("*.json"))],
        paths.track("score").qat,
        paths.metrics / "score_qat.json",
        paths.checkpoints,
        paths.live / STAGE,
        params.export.int8_weight_bits,  # train for the grid the export quantizes to
    )


if __name__ == "__main__":
    main()
