"""The QAT vs PTQ section: each quantization scheme reached by both routes, side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sonfolio.report.items import Section, Table, fmt
from sonfolio.report.sources import Sources, missing, read_json

if TYPE_CHECKING:
    from sonfolio.faces import ReportFace  # annotations only: no stage dep


def qat_section(track: ReportFace, src: Sources) -> Section:
    """The same scheme reached two ways: post-training quantization and quantization-aware
    training, measured by the eval (quality), the bench (latency) and the QAT stage itself."""
    section = Section("QAT vs PTQ (int8, int4)")
    paths = {s: src.metrics_of(track.name, s) for s in ("qat", "eval", "bench")}
    data = {s: read_json(p) for s, p in paths.items()}
    for s, d in data.items():
        if d is None:
            section.items.append(missing(paths[s], track.name, s))
    key = track.report_quality[0]
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
