"""Stage qat: quantization-aware fine-tuning of one track's trained model, per scheme.

Run:    dvc repro qat           (every track: qat@score, qat@speech)
        python -m tasks.qat <track>
Reads:  params.yaml (<track>_qat, <track>_train, train_engine, train_presets,
        export.int8_weight_bits, paths; score also score_data.image_long_side),
        ${paths.tracks.<track>.model}/ (the FP32 model), ${paths.tracks.<track>.data}/,
        ${paths.tracks.<track>.tokenizer}/
Writes: ${paths.tracks.<track>.qat}/<scheme>/ (int8/, int4/: the transformers model's
        save_pretrained with the QAT-trained weights, fake quantization stripped, + tokenizer
        + image processor or feature extractor), ${paths.metrics}/<track>_qat.json,
        ${paths.live}/<track>_qat/<scheme>/; resumable checkpoints under
        ${paths.checkpoints}/<track>_qat/ (removed on success)

The data is read as the train step reads it (the train face's `training`, from
<track>_train); <track>_qat's params say how the fine-tune runs (sonfolio/qat.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio import qat, tracks
from sonfolio.config.qat import QatParams, QatTrain
from sonfolio.config.stage import load_sections
from sonfolio.config.train import EngineOptions
from sonfolio.logs import setup_logging
from sonfolio.train.setup import Training

if TYPE_CHECKING:
    from sonfolio.faces import QatFace  # annotations only: no stage dep


def run(
    face: QatFace,
    cfg: QatTrain,
    training: Training,
    opts: EngineOptions,
    data: Path,
    tokenizer_dir: Path,
    fp32: Path,
    out: Path,
    metrics_path: Path,
    checkpoints: Path,
    live: Path | None,
    int8_bits: int,
) -> dict[str, Any]:
    """Fine-tune the track's model in `fp32` per scheme of `cfg` (`face`: the track's
    qat face, sonfolio.tracks.face; `training`: its training, whose data and model build are
    reused).

    Raises:
        FileNotFoundError (no trained model), DeviceCannotDo, TooManyBadSamples,
        TrainingDiverged, ValueError.
    """
    job = qat.QatJob(
        track=face.name,
        cfg=cfg,
        opts=opts,
        load=face.load_trained,
        fp32=fp32,
        make_track=lambda model: (
            training.setup(data, tokenizer_dir, model=model, name=f"{face.name}_qat").track
        ),
        inputs=[data / "manifest.jsonl", *sorted(tokenizer_dir.glob("*.json"))],
        checkpoints=checkpoints,
        live=live,
        int8_bits=int8_bits,
    )
    return qat.run_stage(job, out, metrics_path)


def main() -> None:
    setup_logging()
    track = tracks.from_argv(sys.argv[1:], "qat")
    params = load_sections(QatParams)
    face = tracks.face(track, "qat")
    cfg, own = params.section(track, "qat"), params.paths.track(track)
    run(
        face,
        cfg,
        tracks.face(track, "train").training(params),
        params.engine_options(cfg.preset),
        own.data,
        own.tokenizer,
        own.model,
        own.qat,
        params.paths.metrics / f"{track}_qat.json",
        params.paths.checkpoints,
        params.paths.live / f"{track}_qat",
        params.export.int8_weight_bits,
    )


if __name__ == "__main__":
    main()
