"""Stage train: train one track's model on its data, and measure it on the held-out splits.

Run:    dvc repro train         (every track: train@score, train@speech)
        python -m tasks.train <track>    (on several GPUs:
        accelerate launch --multi_gpu --num_processes 4 -m tasks.train <track>)
Reads:  params.yaml (<track>_train, train_engine, train_presets, paths; score also
        score_data.image_long_side, the width its systems are rendered at),
        ${paths.tracks.<track>.data}/ (manifest.jsonl, images or audio),
        ${paths.tracks.<track>.tokenizer}/
Writes: ${paths.tracks.<track>.model}/ (the transformers model's save_pretrained, with
        ctc_head.safetensors beside it where it reads with its CTC head, + tokenizer + image
        processor or feature extractor), ${paths.metrics}/<track>_train.json,
        ${paths.live}/<track>_train/ (curves); resumable checkpoints under
        ${paths.checkpoints}/<track>_train/ (removed on success)

What a track trains and how its held-out figures are read is its train face's `training`
(sonfolio/<track>/model/training.py): score, the token error rate of greedy decoding (by the
CTC head
or the decoder, as score_train.decode says) of the `heldout` collections and `test`; speech,
CER and WER on normalised text of `test` (sentences and voices never heard in training).
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any

from sonfolio import tracks
from sonfolio.config.stage import load_sections
from sonfolio.config.train import EngineOptions, TrainParams
from sonfolio.io import staged_dir, write_json
from sonfolio.logs import setup_logging
from sonfolio.train import checkpoint, ctc
from sonfolio.train.device import choose_precision, detect_backend
from sonfolio.train.engine import train
from sonfolio.train.run import RunPaths
from sonfolio.train.setup import Training

log = logging.getLogger(__name__)


def run(
    track: str,
    training: Training,
    opts: EngineOptions,
    data: Path,
    tokenizer_dir: Path,
    out: Path,
    metrics_path: Path,
    checkpoints: Path,
    live: Path | None,
) -> dict[str, Any]:
    """Train `track` (resuming from a checkpoint if one matches), save the model, measure it.

    Raises:
        DeviceCannotDo, TooManyBadSamples, TrainingDiverged, ValueError.
    """
    stage = f"{track}_train"  # the checkpoint folder's and the micro-batch cache's name
    backend = detect_backend()
    training.check_size(backend)  # what the device cannot do fails before any work
    choose_precision(opts.precision, backend)
    setup = training.setup(data, tokenizer_dir, name=stage)
    key = checkpoint.fingerprint(
        {**training.key(), "opts": opts.model_dump()},
        [data / "manifest.jsonl", *sorted(tokenizer_dir.glob("*.json"))],
    )
    folder = checkpoint.run_folder(checkpoints, stage, key)
    paths = RunPaths(folder, live, checkpoints / "micro_batch.json")
    result = train(setup.track, training.cfg, opts, paths)
    if not result.accelerator.is_main_process:
        return result.metrics
    model = result.model
    metrics = {
        **result.metrics,
        "parameters": model.num_parameters(),
        **training.evaluate(model, setup),
    }
    with staged_dir(out) as tmp:
        ctc.save_pretrained(model, tmp)  # and its CTC head where it reads with it
        for part in setup.processors:
            part.save_pretrained(str(tmp))
    write_json(metrics_path, metrics)
    shutil.rmtree(folder)  # finished: nothing left to resume
    log.info("%s: %s", stage, {k: v for k, v in metrics.items() if k != "choices"})
    return metrics


def main() -> None:
    setup_logging()
    track = tracks.from_argv(sys.argv[1:], "train")
    params = load_sections(TrainParams)
    training = tracks.face(track, "train").training(params)
    paths, own = params.paths, params.paths.track(track)
    run(
        track,
        training,
        params.engine_options(training.cfg.preset),
        own.data,
        own.tokenizer,
        own.model,
        paths.metrics / f"{track}_train.json",
        paths.checkpoints,
        paths.live / f"{track}_train",
    )


if __name__ == "__main__":
    main()
