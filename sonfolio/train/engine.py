"""The training loop both tracks share, on Accelerate: steps, logs, validates, checkpoints.

Accelerate does the device placement, mixed precision (autocast + fp16 loss scaling),
gradient accumulation, DDP / FSDP across processes (`accelerate launch` or `torchrun`), the
host-to-device copies (pinned memory, non-blocking, one batch ahead) and the saving of model,
optimizer, scaler and RNG states. What is added, because no library does it:
- a data order that is a pure function of (seed, epoch, position), so a resumed run (after a
  crash, `dvc repro` again) sees exactly the batches the interrupted one would have seen
  (order.py);
- the NaN / Inf guard with rollback (stability.py), the step-time breakdown (timing.py);
- corrupt samples skipped, counted and capped (run.py); early stopping on the validation loss
  (validation.py).

A track hands the engine a `Track` (run.py): the model, datasets, a collate function and a
probe batch; `train` sets up a `Run` over it and drives it to the end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelerate import Accelerator
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
from transformers import PreTrainedModel

from sonfolio.train import checkpoint
from sonfolio.train.observe import Curves, gpu_stats, peak_flops
from sonfolio.train.run import Run, RunPaths, Track
from sonfolio.train.validation import best_model, validate

if TYPE_CHECKING:
    from sonfolio.config.train import EngineOptions, TrainLoop

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a finished run gives back."""

    model: PreTrainedModel  # unwrapped, with the best validation weights
    metrics: dict[str, Any]
    accelerator: Accelerator


def _progress(show: bool) -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        "{task.fields[info]}",
        disable=not show,
    )


def train(track: Track, loop: TrainLoop, opts: EngineOptions, paths: RunPaths) -> TrainResult:
    """Train `track.model`, resuming from the newest checkpoint in `paths.checkpoints`.

    Raises:
        DeviceCannotDo, TooManyBadSamples, TrainingDiverged, ValueError (a batch setting),
        CheckpointDiskFull (no room for the checkpoints, before the first step or at a save).
    """
    run = Run(track, loop, opts, paths)
    resumed = run.resume()
    acc, state = run.acc, run.state
    if acc.is_main_process and loop.checkpoint_every < loop.max_steps:  # before any step
        checkpoint.check_room(paths.checkpoints, acc._models, checkpoint.KEEP)
    curves = Curves(paths.live if acc.is_main_process else None, state.history)
    peak, why = peak_flops(run.backend)
    run.choose("mfu", "", why)
    last: dict[str, float] = {}
    # steps left out of the breakdown (allocator warm-up, compile, first batches): 2 of a run
    # long enough to have a breakdown worth reading
    warmup = 2 if loop.max_steps - state.step > 10 else 0
    with _progress(acc.is_main_process) as bar:
        task = bar.add_task(track.name, total=loop.max_steps, completed=state.step, info="")
        while state.step < loop.max_steps:
            start = time.perf_counter()
            last = run.step()
            state = run.state  # a rollback replaces it
            if not last["advanced"]:
                state.train_seconds += time.perf_counter() - start
                continue
            if warmup and run.timer.steps == warmup:
                run.timer.reset()
                warmup = 0
            step = state.step
            bar.update(task, completed=step, info=f"loss {last['loss']:.3f}")
            if step % loop.log_every == 0:
                _log_train(run, curves, last, peak)
            stop = False
            if step % loop.eval_every == 0 or step == loop.max_steps:
                stop = validate(run, curves, step)
            state.train_seconds += time.perf_counter() - start
            if step % loop.checkpoint_every == 0 and step < loop.max_steps and not stop:
                run.save_checkpoint()
            if stop:
                log.info(
                    "early stop at step %d: no better val loss in %d evaluations",
                    step,
                    loop.early_stopping_patience,
                )
                break
    curves.close()
    return _finish(run, resumed)


def _log_train(run: Run, curves: Curves, last: dict[str, float], peak: float | None) -> None:
    breakdown = run.timer.summary()
    speed = run.timer.throughput()
    flops = run.track.flops_per_sample * speed["samples_per_s"]
    mfu = round(100 * flops / peak, 2) if peak else None
    values = {
        "train/loss": last["loss"],
        "train/lr": last["lr"],
        "train/grad_norm": last["grad_norm"],
        "speed/samples_per_s": round(speed["samples_per_s"], 2),
        "speed/tokens_per_s": round(speed["tokens_per_s"], 1),
        "speed/mfu_pct": mfu,
        "stability/nan_skipped_steps": run.guard.skipped_steps,
        "stability/nan_rollbacks": run.guard.rollbacks,
        "stability/corrupt_samples": len(run.state.bad_samples),
        **{f"time/{k}": v for k, v in breakdown.items() if k.endswith("_pct")},
        **{f"gpu/{k}": v for k, v in gpu_stats(run.backend).items()},
    }
    curves.log(run.state.step, **values)
    pct = " ".join(f"{k[:-4]} {v:.0f}%" for k, v in breakdown.items() if k.endswith("_pct"))
    log.info(
        "step %d loss %.4f lr %.2e | %.1f samples/s %.0f tokens/s | %s",
        run.state.step,
        last["loss"],
        last["lr"],
        speed["samples_per_s"],
        speed["tokens_per_s"],
        pct,
    )


def _finish(run: Run, resumed: bool) -> TrainResult:
    acc, state = run.acc, run.state
    model = best_model(run)
    # the main process deletes the run's folder (best/ with it) once it has saved the model:
    # every process has read best/ before any returns
    acc.wait_for_everyone()
    val_losses = [row["val/loss"] for row in state.history if "val/loss" in row]
    metrics = {
        "steps": state.step,
        "epochs": round(state.epoch + state.batch_in_epoch / run.sampler.per_epoch, 2),
        "train_minutes": round(state.train_seconds / 60, 2),
        "resumed": resumed,
        "val_loss_first": val_losses[0] if val_losses else None,
        "val_loss_best": state.best_val if val_losses else None,
        "val_loss_last": val_losses[-1] if val_losses else None,
        "best_step": state.best_step,
        "train_loss_last": next(
            (r["train/loss"] for r in reversed(state.history) if "train/loss" in r), None
        ),
        "nan_skipped_steps": run.guard.skipped_steps,
        "nan_rollbacks": run.guard.rollbacks,
        "lr_scale": run.guard.lr_scale,
        "corrupt_samples_skipped": len(state.bad_samples),
        "micro_batch": run.micro,
        "grad_accumulation": run.accum,
        "processes": acc.num_processes,
        "precision": run.precision,
        "choices": run.choices,
        "step_time": run.timer.summary(),
        **gpu_stats(run.backend),
    }
    speeds = [r for r in state.history if "speed/samples_per_s" in r]
    if speeds:
        metrics["samples_per_s"] = speeds[-1]["speed/samples_per_s"]
        metrics["tokens_per_s"] = speeds[-1]["speed/tokens_per_s"]
        metrics["mfu_pct"] = speeds[-1]["speed/mfu_pct"]
    utils = [r["gpu/gpu_util_pct"] for r in state.history if "gpu/gpu_util_pct" in r]
    if utils:  # sampled at each log line while training, not the instant training ended
        metrics["gpu_util_pct"] = round(sum(utils) / len(utils), 1)
    return TrainResult(model=model, metrics=metrics, accelerator=acc)
