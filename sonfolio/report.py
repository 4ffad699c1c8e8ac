"""The run report: one self-contained HTML page per run, from the stages' metrics and outputs.

It only reads what the other stages wrote (metrics/*.json, the DVCLive curves, the eval folders)
and never recomputes a figure. A missing input becomes a visible section that names the command
that produces it, so a partial pipeline still gets a report.

Layout of the output folder (docs/report.md): index.html, assets/ (plots, copied sample images
and audio clips: every link is relative and stays inside the folder) and <track>_latency.csv
(one row per benchmarked variant, for `dvc plots show`).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sonfolio import tracks
from sonfolio.config import Report

log = logging.getLogger(__name__)

SUMMARY = "assets/summary.json"  # the page's tables as markdown, for the Prefect artifacts


# --- what a page is made of --------------------------------------------------------------------
@dataclass(frozen=True)
class Media:
    """A table cell that is a link or an audio player; `src` is relative to the report folder."""

    kind: str  # "audio" | "link"
    src: str
    text: str


@dataclass
class Table:
    caption: str
    headers: list[str]
    rows: list[list[str | Media]]
    note: str = ""
    kind: str = "table"


@dataclass
class Figure:
    src: str  # relative to the report folder
    caption: str
    kind: str = "figure"


@dataclass
class Gallery:
    caption: str
    figures: list[Figure]
    kind: str = "gallery"


@dataclass
class Missing:
    """An input that is not there: the page says so and names the command that makes it."""

    what: str
    command: str
    kind: str = "missing"


Item = Table | Figure | Gallery | Missing


@dataclass
class Section:
    title: str
    items: list[Item] = field(default_factory=list)


@dataclass(frozen=True)
class TrackSpec:
    """What differs between the two tracks' metrics."""

    name: str
    quality: tuple[str, ...]  # eval keys per split, the first is the headline (lower is better)
    quality_label: str  # axis label of the headline metric
    bench_quality: str  # the quality key the bench writes per variant


TRACKS = (
    TrackSpec(
        "score",
        ("ser", "cer", "exact_match", "compile_rate", "clean_compile_rate", "delta_ser"),
        "symbol error rate (SER, lower is better)",
        "ter",
    ),
    TrackSpec(
        "speech",
        ("wer", "cer", "delta_wer", "delta_cer", "clips_per_s", "real_time_factor"),
        "word error rate (WER, lower is better)",
        "wer",
    ),
)


@dataclass(frozen=True)
class Sources:
    """Where the report reads from; `root` resolves the relative paths written in metrics."""

    metrics: Path
    live: Path
    evals: dict[str, Path]  # track -> its eval folder (samples/, quality.csv)
    root: Path


# --- small helpers ------------------------------------------------------------------------------
def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON at `path`, or None when the stage that writes it has not run."""
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):  # 4 significant digits, no exponent for large values
        return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"
    return str(value)


def hours(h: float) -> str:
    return f"{h:,.2f} h" if h >= 0.1 else f"{h * 60:.1f} min"


def usd(x: float | None) -> str:
    if x is None:
        return "—"
    return f"${x:,.2f}" if x >= 0.01 else f"${x:.4f}"


def missing(path: Path, stage: str) -> Missing:
    return Missing(f"{path.as_posix()} (stage {stage})", f"dvc repro {stage}")


def stage_name(track: str, step: str) -> str:
    """The dvc.yaml stage that runs `step` for `track` (every step is one stage run for each
    track: `train@score`): what `dvc repro` takes."""
    return f"{step}@{track}"


def mb(n_bytes: int | None) -> str:
    return "—" if n_bytes is None else f"{n_bytes / 1e6:.2f}"


# --- training -----------------------------------------------------------------------------------
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


def training_section(spec: TrackSpec, src: Sources, out: Path, cfg: Report) -> Section:
    stage = f"{spec.name}_train"  # its params section; its outputs' names
    section = Section("Training")
    path = src.metrics / f"{stage}.json"
    train = read_json(path)
    if train is None:
        section.items.append(missing(path, stage_name(spec.name, "train")))
    else:
        section.items += training_tables(train)
    curves = src.live / stage / "plots" / "metrics"
    name = f"assets/{spec.name}_loss.png"
    if loss_curves(curves, f"{spec.name}: training and validation loss", out / name, cfg.dpi):
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
        section.items.append(missing(curves, stage_name(spec.name, "train")))
    return section


# --- quality per variant (eval) -----------------------------------------------------------------
def quality_table(spec: TrackSpec, ev: dict[str, Any]) -> Table:
    rows = []
    for variant, v in ev["variants"].items():
        for split, s in v.get("splits", {}).items():
            rows.append(
                [variant, v.get("kind", "—"), split, *(fmt(s.get(k)) for k in spec.quality)]
            )
    return Table(
        f"Quality per variant (reference: {ev.get('reference', '—')})",
        ["variant", "runtime", "split", *spec.quality],
        rows,
        "delta_*: the variant minus the reference model on the same samples (positive = worse "
        "for error rates). Definitions: docs/evaluation.md. Measured on "
        f"{ev.get('cpu', {}).get('summary', 'a CPU not recorded')}.",
    )


def bar_chart(
    labels: list[str],
    series: dict[str, list[float]],
    xlabel: str,
    title: str,
    dest: Path,
    dpi: int,
    whiskers: dict[str, list[float]] | None = None,
) -> None:
    """Horizontal bars: one group per label, one bar per series (e.g. per split)."""
    from matplotlib.figure import Figure as MplFigure

    height = 0.8 / max(len(series), 1)
    fig = MplFigure(figsize=(6.4, 0.5 + 0.45 * len(labels) * max(len(series), 1) ** 0.5 + 0.8))
    ax = fig.add_subplot()
    for k, (name, values) in enumerate(series.items()):
        ys = [i + k * height for i in range(len(labels))]
        err = None
        if whiskers and name in whiskers:  # p95 above the p50 bar
            err = [
                [0] * len(values),
                [max(w - v, 0) for w, v in zip(whiskers[name], values, strict=True)],
            ]
        ax.barh(ys, values, height=height, label=name, xerr=err, capsize=3)
    ax.set_yticks([i + height * (len(series) - 1) / 2 for i in range(len(labels))], labels)
    ax.invert_yaxis()
    values = [v for vs in series.values() for v in vs if v > 0]
    if values and max(values) > 10 * min(values):  # e.g. torch on CPU vs ONNX Runtime int8
        ax.set_xscale("log")
        xlabel += ", log scale"
    ax.set(xlabel=xlabel, title=title)
    ax.grid(axis="x", alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(dest, dpi=dpi)


def quality_plot(spec: TrackSpec, ev: dict[str, Any], dest: Path, dpi: int) -> None:
    key = spec.quality[0]
    variants = list(ev["variants"])
    splits = list(dict.fromkeys(s for v in ev["variants"].values() for s in v.get("splits", {})))
    series = {
        split: [ev["variants"][v].get("splits", {}).get(split, {}).get(key, 0.0) for v in variants]
        for split in splits
    }
    bar_chart(variants, series, spec.quality_label, f"{spec.name}: quality per variant", dest, dpi)


def sample_variant(ev: dict[str, Any], cfg: Report) -> str:
    """The variant whose samples are shown: cfg.sample_variant, else the eval's reference."""
    if cfg.sample_variant in ev["variants"]:
        return cfg.sample_variant
    ref = ev.get("reference") or next(iter(ev["variants"]))
    log.info(
        "report: samples of %s (report.sample_variant %r was not evaluated)",
        ref,
        cfg.sample_variant,
    )
    return ref


def predictions_by_sample(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)
    return {r["sample"]: r for r in rows if r.get("sample")}


def score_gallery(folder: Path, track: str, variant: str, split: str, out: Path, n: int) -> Gallery:
    """The eval stage's side-by-side PNGs (input, prediction render, truth render), copied."""
    preds = predictions_by_sample(folder / "predictions.jsonl")
    figures = []
    for kind in ("worst", "random"):
        for png in sorted(folder.glob(f"{kind}_*.png"))[:n]:
            rel = f"assets/samples/{track}/{variant}/{split}/{png.name}"
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(png, out / rel)
            p = preds.get(png.stem, {})
            detail = f" — SER {fmt(p['ser'])}, {p.get('compile', '?')}" if "ser" in p else ""
            figures.append(Figure(rel, f"{png.stem}{detail}"))
    return Gallery(f"{variant}, {split} split: worst by SER, then a seeded random draw", figures)


def speech_worst(
    spec_split: dict[str, Any], variant: str, split: str, src: Sources, out: Path, n: int
) -> Table:
    """The worst clips by WER with their audio (copied, so the page plays them) and paths."""
    rows: list[list[str | Media]] = []
    for k, w in enumerate(spec_split.get("worst", [])[:n]):
        audio = src.root / w["audio"]
        cell: str | Media = "(file absent)"
        if audio.is_file():
            rel = f"assets/audio/{variant}/{split}/{k + 1:02d}_{audio.name}"
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(audio, out / rel)
            cell = Media("audio", rel, audio.name)
        rows.append([fmt(w.get("wer")), w["audio"], cell, w.get("ref", ""), w.get("hyp", "")])
    return Table(
        f"Worst clips by WER: {variant}, {split} split",
        ["WER", "audio path", "listen", "reference", "prediction"],
        rows,
    )


def image_samples(
    spec: TrackSpec,
    split_metrics: dict,
    variant: str,
    split: str,
    src: Sources,
    out: Path,
    cfg: Report,
) -> Item:
    """The side-by-side images the eval wrote under samples/<variant>/<split>/."""
    folder = src.evals[spec.name] / "samples" / variant / split
    if not folder.is_dir():
        return missing(folder, stage_name(spec.name, "eval"))
    return score_gallery(folder, spec.name, variant, split, out, cfg.score_samples)


def clip_samples(
    spec: TrackSpec,
    split_metrics: dict,
    variant: str,
    split: str,
    src: Sources,
    out: Path,
    cfg: Report,
) -> Item:
    """The worst clips the eval named in its metrics, with their audio."""
    return speech_worst(split_metrics, variant, split, src, out, cfg.speech_worst)


# How a track's eval samples are shown: its definition's `eval_samples` names the view.
SAMPLE_VIEWS = {"images": image_samples, "clips": clip_samples}


def eval_section(spec: TrackSpec, src: Sources, out: Path, cfg: Report) -> Section:
    stage = stage_name(spec.name, "eval")
    section = Section("Quality per variant (evaluation)")
    path = src.metrics / f"{spec.name}_eval.json"
    ev = read_json(path)
    if ev is None or not ev.get("variants"):
        section.items.append(missing(path, stage))
        return section
    section.items.append(quality_table(spec, ev))
    name = f"assets/{spec.name}_quality.png"
    quality_plot(spec, ev, out / name, cfg.dpi)
    section.items.append(Figure(name, f"{spec.quality[0].upper()} per variant and split"))
    variant = sample_variant(ev, cfg)
    show = SAMPLE_VIEWS[tracks.get(spec.name).eval_samples]
    for split, s in ev["variants"][variant].get("splits", {}).items():
        section.items.append(show(spec, s, variant, split, src, out, cfg))
    return section


# --- size, latency (bench, export) --------------------------------------------------------------
LATENCY_COLUMNS = (
    "variant",
    "runtime",
    "size_mb",
    "e2e_ms_p50",
    "e2e_ms_p95",
    "encoder_ms_p50",
    "decoder_ms_per_token_p50",
    "speedup_vs_torch_fp32",
    "quality",
)


def latency_rows(spec: TrackSpec, bench: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per measured variant (those with a latency), for the CSV and the plot."""
    rows = []
    for name, v in (bench or {}).get("variants", {}).items():
        if "e2e_ms_p50" not in v:
            continue
        rows.append(
            {
                "variant": name,
                "runtime": v.get("runtime"),
                "size_mb": round(v["bytes"] / 1e6, 3) if "bytes" in v else None,
                **{k: v.get(k) for k in LATENCY_COLUMNS[3:-1]},
                "quality": v.get(spec.bench_quality),
            }
        )
    return rows


def write_latency_csv(rows: list[dict[str, Any]], dest: Path) -> None:
    """Always written (header only when the bench has not run): `dvc plots` reads it."""
    with dest.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=LATENCY_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def bench_table(spec: TrackSpec, bench: dict[str, Any]) -> Table:
    q = spec.bench_quality
    variants = bench["variants"]
    columns: list[tuple[str, Any]] = [
        ("runtime", lambda v: v.get("runtime", "—")),
        ("size MB", lambda v: mb(v.get("bytes"))),
        ("size ratio", lambda v: fmt(v.get("size_ratio"))),
        ("encoder ms p50", lambda v: fmt(v.get("encoder_ms_p50"))),
        ("decoder ms/token p50", decoder_ms),
        (
            "end-to-end ms p50 / p95",
            lambda v: f"{fmt(v['e2e_ms_p50'])} / {fmt(v.get('e2e_ms_p95'))}",
        ),
        ("speed-up vs torch FP32", lambda v: fmt(v.get("speedup_vs_torch_fp32"))),
        ("peak RSS MB", lambda v: fmt(v.get("rss_peak_mb"))),
        (f"{q.upper()} (increase)", lambda v: f"{fmt(v.get(q))} ({fmt(v.get(f'{q}_increase'))})"),
    ]
    if any("latency_vs_ctranslate2" in v for v in variants.values()):  # speech: the CT2 peer
        columns.insert(
            7, ("latency vs CTranslate2", lambda v: fmt(v.get("latency_vs_ctranslate2")))
        )
    rows = []
    for name, v in variants.items():
        measured = "e2e_ms_p50" in v
        cells = [get(v) if measured else "—" for _, get in columns]
        rows.append([name, *cells, v.get("status", "—" if measured else "not measured")])
    c = bench.get("conditions", {})
    return Table(
        "Size, latency and quality per variant (bench)",
        ["variant", *(h for h, _ in columns), "status"],
        rows,
        f"{fmt(c.get('samples'))} test samples, batch 1, {fmt(c.get('decode_tokens'))} decoded "
        f"tokens forced, {fmt(c.get('threads'))} threads, a fresh process per variant, on "
        f"{c.get('cpu', {}).get('summary', 'a CPU not recorded')}; "
        "MB = 10^6 bytes. Latency vs CTranslate2 > 1: slower than the peer. A variant read by "
        "its CTC head takes no decoder steps: its end-to-end time is the encoder with the head.",
    )


def decoder_ms(v: dict[str, Any]) -> str:
    """The decoder's ms per token, or why there is none (a model read by its CTC head)."""
    if v.get("decoding") == "ctc":
        return "none (CTC)"
    return fmt(v.get("decoder_ms_per_token_p50"))


def export_table(export: dict[str, Any]) -> Table:
    rows = []
    for name, v in export.items():
        if isinstance(v, dict):
            rows.append(
                [
                    name,
                    mb(v.get("bytes")),
                    fmt(v.get("size_ratio")),
                    v.get("status", "—"),
                    v.get("route", ""),
                ]
            )
    return Table(
        f"Exported ONNX variants (torch FP32 weights: {mb(export.get('torch_fp32_bytes'))} MB)",
        ["variant", "size MB", "size ratio", "status", "how it was made"],
        rows,
    )


def bench_section(spec: TrackSpec, src: Sources, out: Path, cfg: Report) -> Section:
    section = Section("Size and latency per variant")
    stage, export_stage = stage_name(spec.name, "bench"), stage_name(spec.name, "export")
    bench_path = src.metrics / f"{spec.name}_bench.json"
    bench = read_json(bench_path)
    rows = latency_rows(spec, bench)
    write_latency_csv(rows, out / f"{spec.name}_latency.csv")
    if bench is None:
        section.items.append(missing(bench_path, stage))
    else:
        section.items.append(bench_table(spec, bench))
    if rows:
        name = f"assets/{spec.name}_latency.png"
        bar_chart(
            [r["variant"] for r in rows],
            {"p50": [r["e2e_ms_p50"] for r in rows]},
            "end-to-end latency per sample, ms (bar p50, whisker p95)",
            f"{spec.name}: latency per variant",
            out / name,
            cfg.dpi,
            whiskers={"p50": [r["e2e_ms_p95"] for r in rows]},
        )
        section.items.append(Figure(name, f"Latency per variant ({spec.name}_latency.csv)"))
    export_path = src.metrics / f"{spec.name}_export.json"
    export = read_json(export_path)
    section.items.append(export_table(export) if export else missing(export_path, export_stage))
    return section


# --- QAT vs PTQ ---------------------------------------------------------------------------------
def qat_section(spec: TrackSpec, src: Sources) -> Section:
    """The same scheme reached two ways: post-training quantization and quantization-aware
    training, measured by the eval (quality), the bench (latency) and the QAT stage itself."""
    section = Section("QAT vs PTQ (int8, int4)")
    paths = {s: src.metrics / f"{spec.name}_{s}.json" for s in ("qat", "eval", "bench")}
    data = {s: read_json(p) for s, p in paths.items()}
    for s, d in data.items():
        if d is None:
            section.items.append(missing(paths[s], stage_name(spec.name, s)))
    key = spec.quality[0]
    ev = (data["eval"] or {}).get("variants", {})
    bench = (data["bench"] or {}).get("variants", {})
    rows = []
    for scheme in ("int8", "int4"):
        for how in ("ptq", "qat"):
            v = f"{scheme}_{how}"
            splits = ev.get(v, {}).get("splits", {})
            quality = ", ".join(f"{s} {fmt(m.get(key))}" for s, m in splits.items())
            b = bench.get(f"ort_{v}", {})
            trained = (data["qat"] or {}).get(scheme, {}) if how == "qat" else {}
            rows.append(
                [
                    scheme,
                    how.upper(),
                    quality or "not evaluated",
                    fmt(b.get("e2e_ms_p50"))
                    if "e2e_ms_p50" in b
                    else b.get("status", "not measured"),
                    fmt(trained.get("val_loss_best")) if how == "qat" else "—",
                ]
            )
    section.items.append(
        Table(
            f"Quantized variants: {key.upper()} per split (eval), latency (bench)",
            [
                "scheme",
                "route",
                f"{key.upper()} per split",
                "end-to-end ms p50",
                "QAT val loss best",
            ],
            rows,
            "PTQ: ONNX Runtime quantization of the FP32 export; QAT: the model fine-tuned with "
            "fake quantization (torchao), then exported and quantized the same way "
            "(docs/export.md).",
        )
    )
    return section


# --- cost and conditions ------------------------------------------------------------------------
def cost_section(src: Sources) -> Section:
    section = Section("Cost of a training run (the estimate stage)")
    for spec in TRACKS:
        path = src.metrics / f"estimate_{spec.name}.json"
        est = read_json(path)
        if est is None:
            section.items.append(missing(path, stage_name(spec.name, "estimate")))
            continue
        section.items += cost_tables(est, path)
    return section


def cost_tables(est: dict[str, Any], path: Path) -> list[Table]:
    """One price table per track measured in `est` (an estimate stage's metrics)."""
    tables = []
    for name, t in est.get("tracks", {}).items():
        targets = t.get("targets", {})
        targets = {k: targets[k] for k in sorted(targets, key=lambda k: k != "max_steps")}
        rows = []
        for r in t.get("rows", []):
            cost = r.get("cost_usd") or {}
            rows.append(
                [
                    r["gpu"],
                    r["provider"],
                    usd(r.get("usd_per_gpu_hour")),
                    f"{r['speedup']:,.1f}x{' *' if r.get('assumed') else ''}",
                    *(f"{hours(r['hours'][k])} / {usd(cost.get(k))}" for k in targets),
                ]
            )
        tables.append(
            Table(
                f"{name}: {fmt(t.get('seconds_per_step'))} s per step measured on "
                f"{t.get('device')} "
                f"({fmt(t.get('parameters'))} parameters, batch {fmt(t.get('effective_batch'))})",
                [
                    "GPU",
                    "provider",
                    "USD per GPU-hour",
                    "speed-up",
                    *(f"{k} ({fmt(n)} steps): time / USD" for k, n in targets.items()),
                ],
                rows,
                "* assumed: the GPU's dense bf16 peak x an assumed MFU + a fixed per-step overhead "
                f"({est.get('prices')}). Prices: one GPU, on demand, with dates and sources in "
                f"{path.as_posix()} (docs/cost.md). Written by the estimate stage (or "
                "`sonfolio estimate --out`), which times real steps here; the report reads it "
                "rather than re-timing.",
            )
        )
    return tables


def git_commit(root: Path) -> str:
    """HEAD, marked when the working tree differs from it; 'unknown' outside a git checkout."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    try:
        head = git("rev-parse", "HEAD")
    except FileNotFoundError:
        return "unknown (git is not installed)"
    if head.returncode:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def _isa_row(name: str, isa: dict[str, Any] | None) -> list[str]:
    """The CPU's instruction sets, beside the int8 figures measured on it."""
    if not isa:
        return [name, "not recorded"]
    sat = isa.get("int8_saturates")
    note = {True: "8-bit int8 weights would saturate here", False: "no int8 saturation"}
    return [name, f"{isa['summary']} ({note.get(sat, 'saturation unknown')})"]


def conditions_section(src: Sources) -> Section:
    rows = [
        ["report made (UTC)", datetime.now(UTC).strftime("%Y-%m-%d %H:%M")],
        ["git commit", git_commit(src.root)],
        ["machine", f"{platform.node()}: {platform.platform()}, {os.cpu_count()} CPU cores"],
        ["python", platform.python_version()],
    ]
    for spec in TRACKS:
        train = read_json(src.metrics / f"{spec.name}_train.json") or {}
        if "choices" in train:
            rows.append([f"{spec.name}_train device", train["choices"].get("device", "—")])
        bench = read_json(src.metrics / f"{spec.name}_bench.json") or {}
        c = bench.get("conditions")
        if c:
            versions = ", ".join(f"{k} {v}" for k, v in c.get("versions", {}).items())
            rows.append(
                [
                    f"bench@{spec.name} machine",
                    f"{c.get('machine')}, {c.get('cpu_count')} cores, load average before "
                    f"{c.get('load_average_before')}; {versions}",
                ]
            )
            rows.append(_isa_row(f"bench@{spec.name} CPU (int8 / int4)", c.get("cpu")))
        evaluation = read_json(src.metrics / f"{spec.name}_eval.json") or {}
        if evaluation.get("cpu"):
            rows.append(_isa_row(f"{spec.name}_eval CPU (int8 / int4)", evaluation["cpu"]))
    return Section(
        "Conditions", [Table("What these numbers depend on", ["condition", "value"], rows)]
    )


# --- the page -----------------------------------------------------------------------------------
def build(cfg: Report, src: Sources, out: Path) -> dict[str, list[Section]]:
    """Every section, its plots and copied samples written under `out`; keyed by page part."""
    (out / "assets").mkdir(parents=True, exist_ok=True)
    page: dict[str, list[Section]] = {}
    for spec in TRACKS:
        page[spec.name] = [
            training_section(spec, src, out, cfg),
            eval_section(spec, src, out, cfg),
            bench_section(spec, src, out, cfg),
            qat_section(spec, src),
        ]
    page["run"] = [cost_section(src), conditions_section(src)]
    return page


def missing_items(page: dict[str, list[Section]]) -> list[Missing]:
    """Each missing input once (several sections may need the same one)."""
    found = (i for secs in page.values() for s in secs for i in s.items if isinstance(i, Missing))
    return list({m.what: m for m in found}.values())


def render_html(page: dict[str, list[Section]], title: str) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("sonfolio", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.tests["media"] = lambda c: isinstance(c, Media)
    return env.get_template("report.html.j2").render(
        title=title, page=page, missing=missing_items(page)
    )


def markdown_tables(page: dict[str, list[Section]]) -> dict[str, str]:
    """Markdown per page part (tables and missing inputs), for the Prefect UI's artifacts."""

    def cell(c: str | Media) -> str:
        return (c.text if isinstance(c, Media) else str(c)).replace("|", "\\|").replace("\n", " ")

    out = {}
    for part, sections in page.items():
        lines = []
        for s in sections:
            for item in s.items:
                if isinstance(item, Table) and item.rows:
                    lines += [f"**{s.title}: {item.caption}**", ""]
                    lines.append("| " + " | ".join(item.headers) + " |")
                    lines.append("|" + "---|" * len(item.headers))
                    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in item.rows]
                    lines.append("")
                elif isinstance(item, Missing):
                    lines += [
                        f"- *{s.title}*: not yet produced: run `{item.command}` ({item.what})",
                        "",
                    ]
        out[part] = "\n".join(lines)
    return out


def write_report(cfg: Report, src: Sources, out: Path) -> dict[str, Any]:
    """Build the page into `out` (a fresh folder); returns what it shows and what is missing."""
    page = build(cfg, src, out)
    (out / "index.html").write_text(render_html(page, cfg.title), encoding="utf-8")
    gone = missing_items(page)
    for m in gone:
        log.warning("report: not yet produced: %s; run `%s`", m.what, m.command)
    summary = {
        "made": datetime.now(UTC).isoformat(timespec="seconds"),
        "sections": sum(len(s) for s in page.values()),
        "missing": list(dict.fromkeys(m.command for m in gone)),  # each command once
        "images": len(list((out / "assets").rglob("*.png"))),
    }
    # Read by the Prefect flow (flows/pipeline.py) to publish the tables as artifacts.
    (out / SUMMARY).write_text(
        json.dumps({**summary, "markdown": markdown_tables(page)}, indent=2, ensure_ascii=False),
        encoding="utf-8",
    )
    return summary
