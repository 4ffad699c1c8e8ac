"""One training run on Accelerate, set up and stepped: what the engine's loop drives.

Setting up decides, each choice logged with its reason: device, precision, micro-batch and
accumulation, the CTC loss, gradient checkpointing, fp8, compile, optimizer, loader workers and
the batch order. A step is one optimizer step over its micro-batches, under the NaN / Inf guard
(stability.py) and the step-time breakdown (timing.py); corrupt samples are skipped, counted
and capped. Checkpoints (checkpoint.py: no code-running pickles) hold the model, optimizer,
scheduler, scaler and RNG states and the loop's own state, so that a resumed run goes on
exactly where the interrupted one stopped.

A track hands the run a `Track`: the model, datasets, a collate function and a probe batch.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedModel, get_cosine_schedule_with_warmup

from sonfolio.train import checkpoint, ctc, keep_base, speed
from sonfolio.train.batch import fixed_micro_batch, probed_micro_batch
from sonfolio.train.device import (
    Backend,
    choose_precision,
    detect_backend,
    set_matmul_precision,
)
from sonfolio.train.order import EpochBatches
from sonfolio.train.samples import SKIPPED, TOKENS, model_inputs
from sonfolio.train.stability import NanGuard
from sonfolio.train.timing import StepTimer

if TYPE_CHECKING:
    from sonfolio.config.train import EngineOptions, TrainLoop

log = logging.getLogger(__name__)


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
    # a train batch -> the same batch changed afresh (the global RNG, which checkpoints keep),
    # on the device, before the forward pass; the val batches are read as they are
    augment: Callable[[dict[str, Any]], dict[str, Any]] | None = None


@dataclass
class RunPaths:
    """Where a run keeps what outlives it."""

    checkpoints: Path  # this run's folder (checkpoint.run_folder)
    live: Path | None  # DVCLive folder; None: no curves
    batch_cache: Path  # auto micro-batch cache (JSON)


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


def _micro_batch(
    track: Track,
    opts: EngineOptions,
    per_process: int,
    acc: Accelerator,
    backend: Backend,
    precision: str,
    cache: Path,
) -> tuple[int, str]:
    fixed = fixed_micro_batch(opts, per_process, backend)
    if fixed is not None:
        return fixed
    key = f"{backend.name}|{track.name}|{track.model.num_parameters()}|{track.shape}|{precision}"
    key += f"|ckpt={opts.gradient_checkpointing}|fp8={opts.fp8}"
    return probed_micro_batch(track.model, track.probe_batch, acc, per_process, cache, key)


class Run:
    """One training run: set up, step, checkpoint, resume, roll back."""

    def __init__(self, track: Track, loop: TrainLoop, opts: EngineOptions, paths: RunPaths) -> None:
        self.track, self.loop, self.opts, self.paths = track, loop, opts, paths
        self.choices: dict[str, str] = {}
        backend = detect_backend()
        self.backend = backend
        precision, why = choose_precision(opts.precision, backend)
        self.choose("device", backend.name, "the first CUDA/ROCm device, else the CPU")
        self.choose("precision", precision, why)
        self.choose("matmul", "", set_matmul_precision(backend))
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
        if loop.ctc_weight == 1:
            frozen = ctc.freeze_decoder(track.model)
            self.choose(
                "decoder",
                "not trained",
                f"{track.name}.ctc_weight: 1, CTC alone: the model reads with its CTC head; the "
                f"decoder's {frozen:,} parameters keep the weights they start from and run on "
                "one position a step",
            )
        self.base = keep_base.base_copy(track.model, loop.base_kl_weight)
        if self.base is not None:
            self.choose(
                "keep_base",
                f"weight {loop.base_kl_weight}",
                "KL towards the untouched base's token distributions, a frozen copy beside "
                f"the model ({track.name}.keep_base)",
            )
        self.choose(
            "ctc",
            "",
            f"CTC loss on the encoder alone ({track.name}.ctc_weight: 1)"
            if loop.ctc_weight == 1
            else f"auxiliary CTC loss on the encoder, weight {loop.ctc_weight} "
            f"({track.name}.ctc_weight)"
            if self.ctc_head is not None
            else f"off ({track.name}.ctc_weight: 0)",
        )
        self.choose(
            "gradient_checkpointing",
            "",
            speed.gradient_checkpointing(track.model, opts.gradient_checkpointing),
        )
        self.choose("fp8", "", speed.fp8(track.model, opts.fp8, backend))
        micro, why = _micro_batch(
            track, opts, per_process, self.acc, backend, precision, paths.batch_cache
        )
        self.micro, self.accum = micro, per_process // micro
        self.acc.gradient_accumulation_steps = self.accum
        self.choose("micro_batch", f"{micro} x {self.accum} accumulation x {world} processes", why)
        self._build(world)

    def choose(self, what: str, value: str, reason: str) -> None:
        self.choices[what] = f"{value} ({reason})" if value else reason
        log.info("%s: %s", what, self.choices[what])

    def _build(self, world: int) -> None:
        track, loop, acc = self.track, self.loop, self.acc
        model = track.model.to(acc.device)
        model, why = speed.compile_model(model, self.opts.compile, self._probe)
        self.choose("compile", "", why)
        opt, why = speed.optimizer(
            model, self.opts.optimizer, loop.lr, loop.weight_decay, self.backend
        )
        self.choose("optimizer", "", why)
        # Stepped by us once per optimizer step, so the lr does not depend on the world size
        # (Accelerate's prepared scheduler steps once per process).
        self.scheduler = get_cosine_schedule_with_warmup(opt, loop.warmup_steps, loop.max_steps)
        # Not registered with Accelerate (register_for_checkpointing): Accelerate reads such an
        # object back with weights_only=False; checkpoint.py saves its state as JSON instead.
        size = None
        if self.opts.loader_workers == "auto":
            size = speed.decoded_gib(track.train_set, track.val_set)
        workers, preload, why = speed.loader_workers(
            self.opts.loader_workers, self.backend, size, self.opts.preload_max_gib
        )
        self.choose("loader_workers", str(workers), why)
        if preload:
            for dataset in (track.train_set, track.val_set):
                getattr(dataset, "preload", lambda: None)()
        lengths = track.lengths if self.opts.group_by_length else None
        self.sampler = EpochBatches(
            len(track.train_set), self.micro, self.accum * world, loop.seed, lengths
        )
        self.choose(
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
        """One forward/backward on a probe batch (torch.compile's check), RNG and buffers
        untouched (a batch norm's running statistics would count the probe as a step)."""
        batch = model_inputs(self.track.probe_batch(self.micro))
        batch = {k: v.to(self.acc.device) for k, v in batch.items()}
        buffers = {name: b.clone() for name, b in model.named_buffers()}
        with torch.random.fork_rng(devices=[]), self.acc.autocast():
            self.loss(model, batch).backward()
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])

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
                if self.track.augment is not None:
                    batch = self.track.augment(batch)
            with acc.accumulate(model):
                with timer.phase("forward"):
                    loss = self.loss(model, batch)
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

    def loss(self, model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        """The training loss: cross-entropy, plus the KL term towards the base when the section
        keeps one (sonfolio.train.keep_base), joint with CTC when the track has a head; the CTC
        loss alone at ctc_weight 1."""
        config = self.track.model.config
        if self.loop.ctc_weight == 1:
            return ctc.encoder_only(
                model,
                batch,
                self.ctc_head,
                config.decoder_start_token_id,
                blank=config.pad_token_id,
                ignore=(self.track.model.generation_config.eos_token_id,),
                pool=self.loop.ctc_pool,
            )
        outputs = model(**batch)
        loss = outputs.loss
        if self.base is not None:
            kl = keep_base.kl_to_base(self.base, batch, outputs.logits)
            loss = loss + self.loop.base_kl_weight * kl
        if self.ctc_head is None:
            return loss
        return ctc.joint(
            loss,
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

    # --- checkpoints, resume, rollback ----------------------------------------------------
    def _loop_state(self) -> dict[str, Any]:
        self.state.guard = self.guard.state()
        return dict(self.state.__dict__)

    def save_checkpoint(self) -> None:
        checkpoint.save(
            self.acc,
            self.paths.checkpoints,
            self.state.step,
            self._loop_state(),
            keep=checkpoint.KEEP,
            scheduler=self.scheduler,
        )

    def resume(self) -> bool:
        found = checkpoint.load_newest(self.acc, self.paths.checkpoints, self.scheduler)
        if found is None:
            if checkpoint.latest(self.paths.checkpoints) is not None:
                log.warning(
                    "no checkpoint in %s could be read: starting afresh", self.paths.checkpoints
                )
            return False
        path, raw = found
        self.guard.load(raw.pop("guard"))
        self.state = LoopState(**raw)
        self._iter = None
        self._apply_lr_scale()
        log.info("resumed from %s (step %d, epoch %d)", path, self.state.step, self.state.epoch)
        return True

    def _rollback(self) -> None:
        found = checkpoint.load_newest(self.acc, self.paths.checkpoints, self.scheduler)
        if found is None:
            raise RuntimeError(
                f"{self.guard.max_bad_steps} non-finite steps in a row before the first "
                f"checkpoint that loads: "
                f"lower {self.track.name}.lr or checkpoint_every"
            )
        guard = self.guard.state()
        path, raw = found
        raw.pop("guard")
        history, seconds = self.state.history, self.state.train_seconds
        self.state = LoopState(**raw)
        self.state.history, self.state.train_seconds = history, seconds  # keep what happened
        self.guard.load(guard)
        self._iter = None
        self._apply_lr_scale()
        log.warning("rolled back to %s (step %d)", path, self.state.step)
