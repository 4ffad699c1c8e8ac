"""Stage score_train: train the image-to-LilyPond model on the score systems.

Run:    dvc repro score_train      (or: python -m tasks.score_train; on several GPUs:
        accelerate launch --multi_gpu --num_processes 4 -m tasks.score_train)
Reads:  params.yaml (score_train, train_engine, train_presets, score_data.image_long_side,
        paths), ${paths.track("score").data}/ (manifest.jsonl, images), ${paths.track("score").tokenizer}/
Writes: ${paths.track("score").model}/ (VisionEncoderDecoderModel.save_pretrained, ctc_head.safetensors
        with decode: ctc, tokenizer, image processor), ${paths.metrics}/score_train.json,
        ${paths.live}/score_train/ (curves);
        resumable checkpoints under ${paths.checkpoints}/score_train/ (removed on success)

The held-out token error rate comes from greedy decoding of the `heldout` split (collections
never seen in training) and of `test`, by the CTC head or the decoder as score_train.decode
says (the model's config records it; its head is saved as ctc_head.safetensors beside it).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader
from transformers import ViTImageProcessor

from sonfolio.config import EngineOptions, ScoreTrain, load_params
from sonfolio.evaluation import examples, greedy_decode, most_common, token_error_rate
from sonfolio.io import staged_dir, write_json
from sonfolio.logs import setup_logging
from sonfolio.score.batches import ScoreSystems, collate
from sonfolio.score.model import check_size
from sonfolio.score.track import EVAL_SPLITS, make_track
from sonfolio.train import checkpoint, ctc
from sonfolio.train.device import choose_precision, detect_backend
from sonfolio.train.engine import RunPaths, train

log = logging.getLogger(__name__)

STAGE = "score_train"


def run(
    cfg: ScoreTrain,
    opts: EngineOptions,
    data: Path,
    tokenizer_dir: Path,
    width: int,
    out: Path,
    metrics_path: Path,
    checkpoints: Path,
    live: Path | None,
) -> dict[str, Any]:
    """Train (resuming from a checkpoint if one matches), save the model, measure TER.

    Raises:
        DeviceCannotDo, TooManyBadSamples, TrainingDiverged, ValueError.
    """
    backend = detect_backend()
    check_size(STAGE, cfg.model.size, backend)  # what the device cannot do fails before any work
    choose_precision(opts.precision, backend)
    track, sets, tok = make_track(cfg, data, tokenizer_dir, width)
    key = checkpoint.fingerprint(
        {"cfg": cfg.model_dump(), "opts": opts.model_dump(), "width": width},
        [data / "manifest.jsonl", *sorted(tokenizer_dir.glob("*.json"))],
    )
    folder = checkpoint.run_folder(checkpoints, STAGE, key)
    result = train(track, cfg, opts, RunPaths(folder, live, checkpoints / "micro_batch.json"))
    if not result.accelerator.is_main_process:
        return result.metrics
    model = result.model
    metrics = {**result.metrics, "parameters": model.num_parameters(), "decode": cfg.decode}
    constant = most_common([r["text"] for r in sets["train"].rows])
    for split in EVAL_SPLITS:
        metrics.update(_error_rates(model, sets[split], tok, cfg, split, constant))
    height, w = model.config.encoder.image_size
    with staged_dir(out) as tmp:
        ctc.save_pretrained(model, tmp)  # and its CTC head where it reads with it
        tok.save_pretrained(str(tmp))
        # grey pixels in [0, 1], ink = 1, padded to (height, w): sonfolio.score.batches
        ViTImageProcessor(
            do_resize=False,
            do_rescale=False,
            do_normalize=False,
            size={"height": height, "width": w},
        ).save_pretrained(str(tmp))
    write_json(metrics_path, metrics)
    shutil.rmtree(folder)  # finished: nothing left to resume
    log.info("score_train: %s", {k: v for k, v in metrics.items() if k != "choices"})
    return metrics


def _error_rates(
    model: Any, dataset: ScoreSystems, tok: Any, cfg: ScoreTrain, split: str, constant: str
) -> dict:
    """TER of greedy decoding, and of a constant guess (the commonest train system) for
    scale: a model that ignored the image could do about that well."""
    if not len(dataset):
        return {}
    loader = DataLoader(dataset, batch_size=64, collate_fn=collate)
    generate = ctc.generate_fn(model) if ctc.decodes_with_ctc(model.config) else None
    done, hyps = greedy_decode(
        model, loader, tok, "pixel_values", cfg.decode_max_tokens, len(dataset), generate
    )
    refs = [dataset.rows[i]["text"] for i in done]
    return {
        f"{split}_ter": round(token_error_rate(refs, hyps), 4),
        f"{split}_ter_constant_guess": round(token_error_rate(refs, [constant] * len(refs)), 4),
        f"{split}_systems": len(dataset),
        f"{split}_examples": examples(refs, hyps),
    }


def main() -> None:
    setup_logging()
    params = load_params()
    paths, cfg = params.paths, params.score_train
    run(
        cfg,
        params.engine_options(cfg.preset),
        paths.track("score").data,
        paths.track("score").tokenizer,
        params.score_data.image_long_side,
        paths.track("score").model,
        paths.metrics / "score_train.json",
        paths.checkpoints,
        paths.live / STAGE,
    )


if __name__ == "__main__":
    main()
