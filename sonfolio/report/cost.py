"""The cost section: what a training run costs on each cloud GPU (the estimate stage's tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sonfolio.report.items import Section, Table, fmt
from sonfolio.report.sources import Sources, missing, read_json


def hours(h: float) -> str:
    return f"{h:,.2f} h" if h >= 0.1 else f"{h * 60:.1f} min"


def usd(x: float | None) -> str:
    if x is None:
        return "—"
    return f"${x:,.2f}" if x >= 0.01 else f"${x:.4f}"


def cost_section(src: Sources) -> Section:
    section = Section("Cost of a training run (the estimate stage)")
    for track in src.tracks:
        path = src.metrics / f"estimate_{track}.json"
        est = read_json(path)
        if est is None:
            section.items.append(missing(path, track, "estimate"))
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
