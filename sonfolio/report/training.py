"""The training section: the run's figures, error rates, step time, engine choices, loss curves."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio.report.items import Figure, Section, Table, fmt
from sonfolio.report.sources import Sources, missing, read_json

if TYPE_CHECKING:
    from sonfolio.config.report import Report
    from sonfolio.faces import ReportFace


def error_rates(train: dict[str, Any]) -> Table:
    """Every `<split>_<rate>` the training stage measured, beside its constant-guess baseline."""
    rows = []
    for key, value in sorted(train.items()):
        split, _, rate = key.partition("_")
        if split in ("test", "heldout", "val") and rate in ("ter", "cer", "wer"):
            base = train.get(f"{key}_constant_guess")
            gain = "—" if base is None else fmt(base - value)
            rows.append([split, rate.upper(), fmt(value), fmt(base), gain])
    by = {"ctc": "the encoder's CTC head", "attention": "the decoder"}.get(train.get("decode"))
    return Table(
        "Error rates after training (greedy decoding; lower is better)",
        ["split", "rate", "model", "constant guess", "model better by"],
        rows,
        (f"Read by {by} ({train['decode']} decoding). " if by else "")
        + "Constant guess: the one output that scores best on the whole split (the stage's "
        "baseline); a model no better than it has learned nothing from its input. — : the "
        "stage did not write a baseline for that rate.",
    )


def training_tables(train: dict[str, Any]) -> list[Table]:
    summary = Table(
        "Run",
        [
            "steps",
            "best step",
            "minutes",
            "epochs",
            "parameters",
            "val loss first → best",
            "train loss last",
            "samples/s",
            "tokens/s",
        ],
        [
            [
                fmt(train.get("steps")),
                fmt(train.get("best_step")),
                fmt(train.get("train_minutes")),
                fmt(train.get("epochs")),
                fmt(train.get("parameters")),
                f"{fmt(train.get('val_loss_first'))} → {fmt(train.get('val_loss_best'))}",
                fmt(train.get("train_loss_last")),
                fmt(train.get("samples_per_s")),
                fmt(train.get("tokens_per_s")),
            ]
        ],
        "val loss: mean token cross-entropy (nats per token), lower is better.",
    )
    st = train.get("step_time", {})
    phases = ("forward", "backward", "optimizer", "data_wait", "other")
    steps = Table(
        f"Step time breakdown (one optimizer step: {fmt(st.get('step_ms'))} ms)",
        ["phase", "ms per step", "% of step"],
        [[p, fmt(st.get(f"{p}_ms")), fmt(st.get(f"{p}_pct"))] for p in phases],
    )
    choices = Table(
        "Engine choices (each with its reason)",
        ["choice", "value"],
        [[k, str(v)] for k, v in sorted(train.get("choices", {}).items())],
    )
    return [summary, error_rates(train), steps, choices]


def read_tsv(path: Path) -> tuple[list[float], list[float]]:
    steps, values = [], []
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            steps.append(float(row["step"]))
            values.append(float(row[path.stem]))
    return steps, values


def loss_curves(curves: Path, title: str, dest: Path, dpi: int) -> bool:
    """Train and val loss against step from DVCLive's TSVs; False when neither exists."""
    from matplotlib.figure import Figure as MplFigure

    found = [(s, curves / s / "loss.tsv") for s in ("train", "val")]
    found = [(s, p) for s, p in found if p.is_file()]
    if not found:
        return False
    fig = MplFigure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    for split, path in found:
        x, y = read_tsv(path)
        ax.plot(x, y, marker="o" if split == "val" else None, ms=3, label=f"{split} loss")
    ax.set(title=title, xlabel="optimizer step", ylabel="loss (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dest, dpi=dpi)
    return True


def training_section(track: ReportFace, src: Sources, out: Path, cfg: Report) -> Section:
    stage = f"{track.name}_train"  # its params section; its outputs' names
    section = Section("Training")
    path = src.metrics_of(track.name, "train")
    train = read_json(path)
    if train is None:
        section.items.append(missing(path, track.name, "train"))
    else:
        section.items += training_tables(train)
    curves = src.live / stage / "plots" / "metrics"
    name = f"assets/{track.name}_loss.png"
    if loss_curves(curves, f"{track.name}: training and validation loss", out / name, cfg.dpi):
        section.items.append(
            Figure(
                name,
                (
                    f"Loss curves (DVCLive, {curves.as_posix()}). val: token cross-entropy; "
                    "train: the training objective, cross-entropy joint with the auxiliary CTC "
                    f"loss when {stage}.ctc_weight > 0, so the two are not on the same scale."
                ),
            )
        )
    else:
        section.items.append(missing(curves, track.name, "train"))
    return section
