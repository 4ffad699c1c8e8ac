"""Stage speech_train: train (or fine-tune) Whisper on the speech clips.

Run:    dvc repro speech_train      (or: python -m tasks.speech_train; on several GPUs:
        accelerate launch --multi_gpu --num_processes 4 -m tasks.speech_train)
Reads:  params.yaml (speech_train, train_engine, train_presets, paths),
        ${paths.track("speech").data}/ (manifest.jsonl, audio), ${paths.track("speech").tokenizer}/
Writes: ${paths.track("speech").model}/ (WhisperForConditionalGeneration.save_pretrained + tokenizer +
        feature extractor), ${paths.metrics}/speech_train.json, ${paths.live}/speech_train/;
        resumable checkpoints under ${paths.checkpoints}/speech_train/ (removed on success)

The held-out error rates come from greedy decoding of the `test` split (sentences and voices
never heard in training): CER and WER on normalised text (sonfolio.speech.normalize).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from sonfolio.config import EngineOptions, SpeechTrain, load_params
from sonfolio.evaluation import (
    char_error_rate,
    examples,
    greedy_decode,
    most_common,
    word_error_rate,
)
from sonfolio.io import staged_dir, write_json
from sonfolio.logs import setup_logging
from sonfolio.speech.batches import SpeechClips, collate
from sonfolio.speech.model import check_size
from sonfolio.speech.normalize import normalize
from sonfolio.speech.track import EVAL_SPLITS, make_track
from sonfolio.train import checkpoint
from sonfolio.train.device import choose_precision, detect_backend
from sonfolio.train.engine import RunPaths, train

log = logging.getLogger(__name__)

STAGE = "speech_train"


def run(
    cfg: SpeechTrain,
    opts: EngineOptions,
    data: Path,
    processor_dir: Path,
    out: Path,
    metrics_path: Path,
    checkpoints: Path,
    live: Path | None,
) -> dict[str, Any]:
    """Train (resuming from a checkpoint if one matches), save the model, measure CER.

    Raises:
        DeviceCannotDo, TooManyBadSamples, TrainingDiverged, ValueError.
    """
    backend = detect_backend()
    check_size(STAGE, cfg.model, backend)  # what the device cannot do fails before any work
    choose_precision(opts.precision, backend)
    track, sets, tok, features = make_track(cfg, data, processor_dir)
    key = checkpoint.fingerprint(
        {"cfg": cfg.model_dump(), "opts": opts.model_dump()},
        [data / "manifest.jsonl", *sorted(processor_dir.glob("*.json"))],
    )
    folder = checkpoint.run_folder(checkpoints, STAGE, key)
    result = train(track, cfg, opts, RunPaths(folder, live, checkpoints / "micro_batch.json"))
    if not result.accelerator.is_main_process:
        return result.metrics
    model = result.model
    metrics = {**result.metrics, "parameters": model.num_parameters()}
    constant = most_common([r["text_norm"] for r in sets["train"].rows])
    for split in EVAL_SPLITS:
        metrics.update(_error_rates(model, sets[split], tok, cfg, split, constant))
    with staged_dir(out) as tmp:
        for part in (model, tok, features):
            part.save_pretrained(str(tmp))
    write_json(metrics_path, metrics)
    shutil.rmtree(folder)  # finished: nothing left to resume
    log.info("speech_train: %s", {k: v for k, v in metrics.items() if k != "choices"})
    return metrics


def _error_rates(
    model: Any, dataset: SpeechClips, tok: Any, cfg: SpeechTrain, split: str, constant: str
) -> dict:
    """CER/WER of greedy decoding, and the CER of a constant guess (the commonest train
    transcript) for scale."""
    if not len(dataset):
        return {}
    loader = DataLoader(dataset, batch_size=64, collate_fn=collate)
    kwargs = {"language": cfg.model.language} if cfg.model.language else {}
    # the start token counts against the decoder's positions
    max_new = min(cfg.decode_max_tokens, model.config.max_target_positions - 1)
    done, hyps = greedy_decode(
        model,
        loader,
        tok,
        "input_features",
        max_new,
        len(dataset),
        generate=lambda x, **kw: model.generate(x, **kw, **kwargs),
    )
    refs = [dataset.rows[i]["text_norm"] for i in done]
    norm = [normalize(h) for h in hyps]
    return {
        f"{split}_cer": round(char_error_rate(refs, norm), 4),
        f"{split}_cer_constant_guess": round(char_error_rate(refs, [constant] * len(refs)), 4),
        f"{split}_wer": round(word_error_rate(refs, norm), 4),
        f"{split}_clips": len(dataset),
        f"{split}_examples": examples([dataset.rows[i]["text"] for i in done], hyps),
    }


def main() -> None:
    setup_logging()
    params = load_params()
    paths, cfg = params.paths, params.speech_train
    run(
        cfg,
        params.engine_options(cfg.preset),
        paths.track("speech").data,
        paths.track("speech").tokenizer,
        paths.track("speech").model,
        paths.metrics / "speech_train.json",
        paths.checkpoints,
        paths.live / STAGE,
    )


if __name__ == "__main__":
    main()
