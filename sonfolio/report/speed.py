"""The size and latency section: each variant's size, latency and quality (bench, export).

It also writes <track>_latency.csv, one row per measured variant, which `dvc plots` draws.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio.report.items import Figure, Section, Table, fmt
from sonfolio.report.plots import bar_chart
from sonfolio.report.sources import Sources, missing, read_json

if TYPE_CHECKING:
    from sonfolio.config.report import Report
    from sonfolio.faces import ReportFace

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


def mb(n_bytes: int | None) -> str:
    return "—" if n_bytes is None else f"{n_bytes / 1e6:.2f}"


def latency_rows(track: ReportFace, bench: dict[str, Any] | None) -> list[dict[str, Any]]:
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
                "quality": v.get(track.gate_metric),
            }
        )
    return rows


def write_latency_csv(rows: list[dict[str, Any]], dest: Path) -> None:
    """Always written (header only when the bench has not run): `dvc plots` reads it."""
    with dest.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=LATENCY_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def bench_table(track: ReportFace, bench: dict[str, Any]) -> Table:
    q = track.gate_metric
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


def bench_section(track: ReportFace, src: Sources, out: Path, cfg: Report) -> Section:
    section = Section("Size and latency per variant")
    bench_path = src.metrics_of(track.name, "bench")
    bench = read_json(bench_path)
    rows = latency_rows(track, bench)
    write_latency_csv(rows, out / f"{track.name}_latency.csv")
    if bench is None:
        section.items.append(missing(bench_path, track.name, "bench"))
    else:
        section.items.append(bench_table(track, bench))
    if rows:
        name = f"assets/{track.name}_latency.png"
        bar_chart(
            [r["variant"] for r in rows],
            {"p50": [r["e2e_ms_p50"] for r in rows]},
            "end-to-end latency per sample, ms (bar p50, whisker p95)",
            f"{track.name}: latency per variant",
            out / name,
            cfg.dpi,
            whiskers={"p50": [r["e2e_ms_p95"] for r in rows]},
        )
        section.items.append(Figure(name, f"Latency per variant ({track.name}_latency.csv)"))
    export_path = src.metrics_of(track.name, "export")
    export = read_json(export_path)
    section.items.append(
        export_table(export) if export else missing(export_path, track.name, "export")
    )
    return section
