"""The training loop both tracks share, on Accelerate.

Accelerate does the device placement, mixed precision (autocast + fp16 loss scaling),
gradient accumulation, DDP / FSDP across processes (`accelerate launch` or `torchrun`), the
host-to-device copies (pinned memory, non-blocking, one batch ahead) and the saving of model,
optimizer, scaler and RNG states. What is added here, because no library does it:
- a data order that is a pure function of (seed, epoch, position), so a resumed run (after a
  crash, `dvc repro` again) sees exactly the batches the interrupted one would have seen;
- the NaN / Inf guard with rollback (stability.py), the step-time breakdown (timing.py);
- corrupt samples skipped, counted and capped; early stopping on the validation loss.

A track hands the engine a `Track`: the model, datasets, a collate function and a probe batch.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedModel, get_cosine_schedule_with_warmup
from transformers.trainer_pt_utils import get_length_grouped_indices

from sonfolio.config import EngineOptions, TrainLoop
from sonfolio.train import checkpoint, ctc, speed
from sonfolio.train.batch import auto_micro_batch
from sonfolio.train.device import (
    Backend,
    choose_precision,
    detect_backend,
    set_matmul_precision,
)
from sonfolio.train.observe import Curves, gpu_stats, peak_flops
from sonfolio.train.stability import NanGuard
from sonfolio.train.timing import StepTimer

log = logging.getLogger(__name__)

SKIPPED = "skipped"  # the collate functions' key for the indices of corrupt samples
TOKENS = "tokens"  # and for the number of label tokens (an int, counted on the host)
INDICES = "indices"  # and for the dataset indices of the samples in the batch


class TooManyBadSamples(RuntimeError):
    """More corrupt train samples than the stage's max_skip_fraction allows."""


@dataclass
class Track:
    """What a track gives the engine."""

    model: PreTrainedModel
    train_set: Dataset
    val_set: Dataset
    collate: Callable[[list[Any]], dict[str, Any]]  # drops corrupt samples, lists them
    probe_batch: Callable[[int], dict[str, Any]]  # n copies of the largest sample
    flops_per_sample: float  # ~6 x params x tokens, for MFU
    shape: str  # the input shape, for the micro-batch cache key
    name: str  # the stage, for logs and the cache key
    # label length of each train sample: batches of like lengths pad less (group_by_length)
    lengths: list[int] | None = None


@dataclass
class RunPaths:
    checkpoints: Path  # this run's folder (checkpoint.run_folder)
    live: Path | None  # DVCLive folder; None: no curves
    batch_cache: Path  # auto micro-batch cache (JSON)


@dataclass
class TrainResult:
    model: PreTrainedModel  # unwrapped, with the best validation weights
    metrics: dict[str, Any]
    accelerator: Accelerator


class EpochBatches:
    """Micro-batches of sample indices in a seeded order per epoch, cut to whole optimizer
    steps (`group` = micro-batches per step over all processes); `start` skips the first ones.
    Accelerate's BatchSamplerShard hands batch i to process i % world_size.

    With `lengths`, each micro-batch holds samples of like length (transformers'
    get_length_grouped_indices, as its Trainer's group_by_length: shuffled, then sorted within
    mega-batches of 50 micro-batches): the decoder pads to each batch's longest label, so this
    cuts the padded tokens it computes. Order stays seeded per epoch, so resume is exact."""

    drop_last = True

    def __init__(
        self, size: int, batch_size: int, group: int, seed: int, lengths: list[int] | None = None
    ) -> None:
        self.size, self.batch_size, self.group, self.seed = size, batch_size, group, seed
        self.lengths = lengths
        self.epoch, self.start = 0, 0
        self.per_epoch = size // batch_size // group * group
        if self.per_epoch == 0:
            raise ValueError(
                f"{size} train samples are fewer than one optimizer step "
                f"({group} x {batch_size}): lower effective_batch or add data"
            )

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        if self.lengths is None:
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = get_length_grouped_indices(self.lengths, self.batch_size, generator=generator)
        for i in range(self.start, self.per_epoch):
            yield order[i * self.batch_size : (i + 1) * self.batch_size]

    def __len__(self) -> int:
        return self.per_epoch - self.start


@dataclass
class LoopState:
    """Everything the loop needs to resume exactly, besides what Accelerate saves."""

    step: int = 0  # optimizer steps done
    epoch: int = 0
    batch_in_epoch: int = 0  # global micro-batches of this epoch already consumed
    best_val: float = math.inf
    best_step: int = -1
    evals_since_best: int = 0
    bad_samples: list[int] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    guard: dict[str, Any] = field(default_factory=dict)
    train_seconds: float = 0.0


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if k not in (SKIPPED, TOKENS, INDICES)}


def _micro_batch(
    track: Track,
    opts: EngineOptions,
    per_process: int,
    acc: Accelerator,
    backend: Backend,
    precision: str,
    cache: Path,
) -> tuple[int, str]:
    if opts.micro_batch == "full":
        return per_process, "the whole per-process batch (train_engine.micro_batch: full)"
    if isinstance(opts.micro_batch, int):
        if per_process % opts.micro_batch:
            raise ValueError(
                f"train_engine.micro_batch = {opts.micro_batch} does not divide the "
                f"{per_process} samples per process and step: pick a divisor, or auto"
            )
        return opts.micro_batch, "as configured"
    if not backend.is_gpu:
        return per_process, "CPU: memory is not the limit, so the whole per-process batch"
    model = track.model.to(acc.device)

    def try_step(n: int) -> None:
        batch = {k: v.to(acc.device) for k, v in model_inputs(track.probe_batch(n)).items()}
        with acc.autocast():
            model(**batch).loss.backward()
        model.zero_grad(set_to_none=True)

    key = f"{backend.name}|{track.name}|{track.model.num_parameters()}|{track.shape}|{precision}"
    key += f"|ckpt={opts.gradient_checkpointing}|fp8={opts.fp8}"
    return auto_micro_batch(try_step, per_process, cache, key)


class Run:
    """One training run: set up, step, evaluate, checkpoint, roll back, finish."""

    def __init__(self, track: Track, loop: TrainLoop, opts: EngineOptions, paths: RunPaths) -> None:
        self.track, self.loop, self.opts, self.paths = track, loop, opts, paths
        self.choices: dict[str, str] = {}
        backend = detect_backend()
        self.backend = backend
        precision, why = choose_precision(opts.precision, backend)
        self._choose("device", backend.name, "the first CUDA/ROCm device, else the CPU")
        self._choose("precision", precision, why)
        self._choose("matmul", "", set_matmul_precision(backend))
        set_seed(loop.seed)
        self.acc = Accelerator(
            mixed_precision=precision,
            cpu=not backend.is_gpu,
            dataloader_config=DataLoaderConfiguration(non_blocking=backend.is_gpu),
            step_scheduler_with_optimizer=False,
            rng_types=[],  # the data order is our sampler's; Accelerate need not sync RNGs
        )
        self.precision = precision
        world = self.acc.num_processes
        if loop.effective_batch % world:
            raise ValueError(
                f"{track.name}.effective_batch = {loop.effective_batch} is not divisible by the "
                f"{world} processes: make it a multiple of {world}"
            )
        per_process = loop.effective_batch // world
        self.ctc_head = ctc.attach(track.model) if loop.ctc_weight > 0 else None
        self._choose(
            "ctc",
            "",
            f"auxiliary CTC loss on the encoder, weight {loop.ctc_weight} ({track.name}.ctc_weight)"
            if self.ctc_head is not None
            else f"off ({track.name}.ctc_weight: 0)",
        )
        self._choose(
            "gradient_checkpointing",
            "",
            speed.gradient_checkpointing(track.model, opts.gradient_checkpointing),
        )
        self._choose("fp8", "", speed.fp8(track.model, opts.fp8, backend))
        micro, why = _micro_batch(
            track, opts, per_process, self.acc, backend, precision, paths.batch_cache
        )
        self.micro, self.accum = micro, per_process // micro
        self.acc.gradient_accumulation_steps = self.accum
        self._choose("micro_batch", f"{micro} x {self.accum} accumulation x {world} processes", why)
        self._build(world)

    def _choose(self, what: str, value: str, reason: str) -> None:
        self.choices[what] = f"{value} ({reason})" if value else reason
        log.info("%s: %s", what, self.choices[what])

    def _build(self, world: int) -> None:
        track, loop, acc = self.track, self.loop, self.acc
        model = track.model.to(acc.device)
        model, why = speed.compile_model(model, self.opts.compile, self._probe)
        self._choose("compile", "", why)
        opt, why = speed.optimizer(
            model, self.opts.optimizer, loop.lr, loop.weight_decay, self.backend
        )
        self._choose("optimizer", "", why)
        # Stepped by us once per optimizer step, so the lr does not depend on the world size
        # (Accelerate's prepared scheduler steps once per process).
        self.scheduler = get_cosine_schedule_with_warmup(opt, loop.warmup_steps, loop.max_steps)
        acc.register_for_checkpointing(self.scheduler)
        workers, preload, why = speed.loader_workers(self.opts.loader_workers, self.backend)
        self._choose("loader_workers", str(workers), why)
        if preload:
            for dataset in (track.train_set, track.val_set):
                getattr(dataset, "preload", lambda: None)()
        lengths = track.lengths if self.opts.group_by_length else None
        self.sampler = EpochBatches(
            len(track.train_set), self.micro, self.accum * world, loop.seed, lengths
        )
        self._choose(
            "batch_order",
            "",
            "samples of like label length batched together (train_engine.group_by_length)"
            if lengths is not None
            else "shuffled",
        )
        loader = DataLoader(
            track.train_set,
            batch_sampler=self.sampler,
            collate_fn=track.collate,
            num_workers=workers,
            pin_memory=self.backend.is_gpu,
            persistent_workers=workers > 0,
            prefetch_factor=4 if workers else None,
            generator=torch.Generator().manual_seed(loop.seed),  # leaves the global RNG alone
        )
        val = DataLoader(
            track.val_set, batch_size=self.micro, collate_fn=track.collate, num_workers=0
        )
        self.model, self.opt, self.loader, self.val_loader = acc.prepare(model, opt, loader, val)
        nan = self.opts.nan_guard
        self.guard = NanGuard(nan.max_bad_steps, nan.lr_backoff, nan.max_rollbacks)
        self.timer = StepTimer(acc.device)
        self.state = LoopState()
        self._iter: Iterator[dict[str, Any]] | None = None

    def _probe(self, model: torch.nn.Module) -> None:
        """One forward/backward on a probe batch (torch.compile's check), RNG untouched."""
        batch = model_inputs(self.track.probe_batch(self.micro))
        batch = {k: v.to(self.acc.device) for k, v in batch.items()}
        with torch.random.fork_rng(devices=[]), self.acc.autocast():
            self._loss(model, batch).backward()
        model.zero_grad(set_to_none=True)

    # --- data -------------------------------------------------------------------------
    def _next_batch(self) -> tuple[dict[str, Any], int]:
        """The next micro-batch's model inputs and its number of label tokens."""
        while True:
            if self._iter is None:
                self.sampler.epoch, self.sampler.start = self.state.epoch, self.state.batch_in_epoch
                self._iter = iter(self.loader)
            try:
                batch = next(self._iter)
            except StopIteration:
                self.state.epoch, self.state.batch_in_epoch, self._iter = (
                    self.state.epoch + 1,
                    0,
                    None,
                )
                continue
            self.state.batch_in_epoch += self.acc.num_processes
            self._count_bad(batch[SKIPPED])
            return model_inputs(batch), batch[TOKENS]

    def _count_bad(self, skipped: list[int]) -> None:
        if not skipped:
            return
        bad = set(self.state.bad_samples) | set(skipped)
        self.state.bad_samples = sorted(bad)
        cap = self.loop.max_skip_fraction * len(self.track.train_set)
        log.warning("skipped corrupt train sample(s) %s (%d so far)", skipped, len(bad))
        if len(bad) > cap:
            raise TooManyBadSamples(
                f"{len(bad)} corrupt train samples (indices {sorted(bad)[:20]}) exceed "
                f"{self.track.name}.max_skip_fraction = {self.loop.max_skip_fraction} of "
                f"{len(self.track.train_set)}: fix or remove them (rerun the data stage)"
            )

    # --- one optimizer step -----------------------------------------------------------
    def step(self) -> dict[str, float]:
        acc, timer, model = self.acc, self.timer, self.model
        model.train()
        timer.start_step(self.state.step)
        losses, samples, tokens = [], 0, 0
        for _ in range(self.accum):
            with timer.phase("data_wait"):
                batch, n_tokens = self._next_batch()
            with acc.accumulate(model):
                with timer.phase("forward"):
                    loss = self._loss(model, batch)
                with timer.phase("backward"):
                    acc.backward(loss)
            losses.append(loss.detach())
            samples += len(batch["labels"])
            tokens += n_tokens
        with timer.phase("optimizer"):
            info = self._optimizer_step(torch.stack(losses).mean())
        world = acc.num_processes
        timer.end_step(samples * world, tokens * world)
        return info

    def _loss(self, model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        """The training loss: cross-entropy, joint with CTC when the track has a head."""
        outputs = model(**batch)
        if self.ctc_head is None:
            return outputs.loss
        config = self.track.model.config
        return ctc.joint(
            outputs.loss,
            outputs,
            batch["labels"],
            self.ctc_head,
            self.loop.ctc_weight,
            blank=config.pad_token_id,
            ignore=(self.track.model.generation_config.eos_token_id,),
            pool=self.loop.ctc_pool,
        )

    def _optimizer_step(self, loss: torch.Tensor) -> dict[str, float]:
        acc, opt = self.acc, self.opt
        clip = self.opts.grad_clip or math.inf
        grad_norm = acc.clip_grad_norm_(self.model.parameters(), clip)
        loss_value = acc.reduce(loss, "mean").item()
        norm_value = float(grad_norm) if self.precision != "fp16" else 0.0  # the scaler copes
        verdict = (
            self.guard.check(self.state.step, loss_value, norm_value)
            if self.opts.nan_guard.enabled
            else "ok"
        )
        if verdict == "ok":
            opt.step()
            self.scheduler.step()
            self._apply_lr_scale()
        opt.zero_grad(set_to_none=True)
        if verdict == "rollback":
            self._rollback()
        elif verdict == "ok":  # a skipped step consumes its batches but not a step number
            self.state.step += 1
        return {
            "loss": loss_value,
            "grad_norm": float(grad_norm),
            "lr": self._lr(),
            "advanced": verdict == "ok",
        }

    def _apply_lr_scale(self) -> None:
        for group, lr in zip(self.opt.param_groups, self.scheduler.get_last_lr(), strict=True):
            group["lr"] = lr * self.guard.lr_scale

    def _lr(self) -> float:
        return self.opt.param_groups[0]["lr"]

    # --- validation, checkpoints, rollback ----------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> float:
        """Token-weighted mean validation loss over all processes: the cross-entropy, or for
        a model read by its CTC head (sonfolio.train.ctc) the training loss, CTC included, so
        that the best checkpoint and early stopping follow what reads."""
        self.model.eval()
        joint = self.ctc_head is not None and ctc.decodes_with_ctc(self.track.model.config)
        total = torch.zeros(2, device=self.acc.device)
        for raw in self.val_loader:
            batch = model_inputs(raw)
            with self.acc.autocast():
                loss = self._loss(self.model, batch) if joint else self.model(**batch).loss
            n = (batch["labels"] != -100).sum()
            total += torch.stack([loss.float() * n, n.float()])
        total = self.acc.reduce(total, "sum")
        return (total[0] / total[1].clamp(min=1)).item()

    def _loop_state(self) -> dict[str, Any]:
        self.state.guard = self.guard.state()
        return dict(self.state.__dict__)

    def save_checkpoint(self) -> None:
        checkpoint.save(
            self.acc, self.paths.checkpoints, self.state.step, self._loop_state(), keep=2
        )

    def save_best(self) -> None:
        """The best weights so far, with their config (save_pretrained: tied weights handled),
        written beside and renamed into place."""
        best = self.paths.checkpoints / "best"
        tmp = self.paths.checkpoints / ".best.tmp"
        state_dict = self.acc.get_state_dict(self.model)  # on every process (FSDP gathers)
        # Accelerate unwraps DDP/FSDP but keeps torch.compile's wrapper, whose keys start with
        # "_orig_mod."; save_pretrained needs the plain model's names
        state_dict = {k.removeprefix(COMPILED + "."): v for k, v in state_dict.items()}
        if self.acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            # the plain model's weights; its CTC head beside them where it reads with it
            ctc.save_pretrained(plain(self.acc.unwrap_model(self.model)), tmp, state_dict)
            shutil.rmtree(best, ignore_errors=True)
            tmp.rename(best)
        self.acc.wait_for_everyone()

    def resume(self) -> bool:
        path = checkpoint.latest(self.paths.checkpoints)
        if path is None:
            return False
        raw = checkpoint.load(self.acc, path)
        self.guard.load(raw.pop("guard"))
        self.state = LoopState(**raw)
        self._iter = None
        self._apply_lr_scale()
        log.info("resumed from %s (step %d, epoch %d)", path, self.state.step, self.state.epoch)
        return True

    def _rollback(self) -> None:
        path = checkpoint.latest(self.paths.checkpoints)
        if path is None:
            raise RuntimeError(
                f"{self.guard.max_bad_steps} non-finite steps in a row before the first "
                f"checkpoint: "
                f"lower {self.track.name}.lr or checkpoint_every"
            )
        guard = self.guard.state()
        raw = checkpoint.load(self.acc, path)
        raw.pop("guard")
        history, seconds = self.state.history, self.state.train_seconds
        self.state = LoopState(**raw)
        self.state.history, self.state.train_seconds = history, seconds  # keep what happened
        self.guard.load(guard)
        self._iter = None
        self._apply_lr_scale()
        log.warning("rolled back to %s (step %d)", path, self.state.step)


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
        DeviceCannotDo, TooManyBadSamples, TrainingDiverged, ValueError (a batch setting).
    """
    run = Run(track, loop, opts, paths)
    resumed = run.resume()
    acc, state = run.acc, run.state
    curves = Curves(paths.live if acc.is_main_process else None, state.history)
    peak, why = peak_flops(run.backend)
    run._choose("mfu", "", why)
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
                stop = _validate(run, curves, step)
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


def _validate(run: Run, curves: Curves, step: int) -> bool:
    """Log the val loss, keep the best weights; True when early stopping says stop."""
    val = run.evaluate()
    state = run.state
    curves.log(step, **{"val/loss": val})
    if val < state.best_val:
        state.best_val, state.best_step, state.evals_since_best = val, step, 0
        run.save_best()
    else:
        state.evals_since_best += 1
    log.info(
        "step %d val loss %.4f (best %.4f at step %d)", step, val, state.best_val, state.best_step
    )
    return state.evals_since_best >= run.loop.early_stopping_patience


def _finish(run: Run, resumed: bool) -> TrainResult:
    acc, state = run.acc, run.state
    model = plain(acc.unwrap_model(run.model))
    if not ctc.decodes_with_ctc(model.config):
        ctc.detach(model)  # the saved and evaluated model is the plain transformers class
    best = run.paths.checkpoints / "best"
    if (best / "config.json").is_file():
        # from_pretrained restores tied weights; the live instance keeps what the track set on
        # it (no ViT pooler, the loss type), so only the weights are copied over
        saved = ctc.load_head(type(model).from_pretrained(str(best)), best).state_dict()
        missing, _ = model.load_state_dict(saved, strict=False)
        if missing:
            raise RuntimeError(f"the best checkpoint in {best} lacks {missing[:5]}")
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


COMPILED = "_orig_mod"  # the attribute torch.compile's OptimizedModule holds the model in


def plain(model: torch.nn.Module) -> PreTrainedModel:
    """The model under torch.compile's wrapper."""
    return getattr(model, COMPILED, model)
