"""Validation during training: the val loss, the best weights kept, early stopping.

The loss is token-weighted over all processes; the best weights are saved beside the
checkpoints and put back into the model at the end.
"""

from __future__ import annotations

import logging
import shutil

import torch
from transformers import PreTrainedModel

from sonfolio.train import ctc
from sonfolio.train.observe import Curves
from sonfolio.train.run import Run
from sonfolio.train.samples import model_inputs

log = logging.getLogger(__name__)

COMPILED = "_orig_mod"  # the attribute torch.compile's OptimizedModule holds the model in


def plain(model: torch.nn.Module) -> PreTrainedModel:
    """The model under torch.compile's wrapper."""
    return getattr(model, COMPILED, model)


@torch.no_grad()
def evaluate(run: Run) -> float:
    """Token-weighted mean validation loss over all processes: the cross-entropy, or for
    a model read by its CTC head (sonfolio.train.ctc) the training loss, CTC included, so
    that the best checkpoint and early stopping follow what reads."""
    run.model.eval()
    joint = run.ctc_head is not None and ctc.decodes_with_ctc(run.track.model.config)
    total = torch.zeros(2, device=run.acc.device)
    for raw in run.val_loader:
        batch = model_inputs(raw)
        with run.acc.autocast():
            loss = run.loss(run.model, batch) if joint else run.model(**batch).loss
        n = (batch["labels"] != -100).sum()
        total += torch.stack([loss.float() * n, n.float()])
    total = run.acc.reduce(total, "sum")
    return (total[0] / total[1].clamp(min=1)).item()


def save_best(run: Run) -> None:
    """The best weights so far, with their config (save_pretrained: tied weights handled),
    written beside and renamed into place."""
    best = run.paths.checkpoints / "best"
    tmp = run.paths.checkpoints / ".best.tmp"
    state_dict = run.acc.get_state_dict(run.model)  # on every process (FSDP gathers)
    # Accelerate unwraps DDP/FSDP but keeps torch.compile's wrapper, whose keys start with
    # "_orig_mod."; save_pretrained needs the plain model's names
    state_dict = {k.removeprefix(COMPILED + "."): v for k, v in state_dict.items()}
    if run.acc.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        # the plain model's weights; its CTC head beside them where it reads with it
        ctc.save_pretrained(plain(run.acc.unwrap_model(run.model)), tmp, state_dict)
        shutil.rmtree(best, ignore_errors=True)
        tmp.rename(best)
    run.acc.wait_for_everyone()


def validate(run: Run, curves: Curves, step: int) -> bool:
    """Log the val loss, keep the best weights; True when early stopping says stop."""
    val = evaluate(run)
    state = run.state
    curves.log(step, **{"val/loss": val})
    if val < state.best_val:
        state.best_val, state.best_step, state.evals_since_best = val, step, 0
        save_best(run)
    else:
        state.evals_since_best += 1
    log.info(
        "step %d val loss %.4f (best %.4f at step %d)", step, val, state.best_val, state.best_step
    )
    return state.evals_since_best >= run.loop.early_stopping_patience


def best_model(run: Run) -> PreTrainedModel:
    """The plain model (unwrapped, uncompiled; its CTC head kept only where it reads with it)
    holding the best validation weights, where any were saved."""
    model = plain(run.acc.unwrap_model(run.model))
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
    return model
