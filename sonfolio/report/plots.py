"""The report's bar charts (matplotlib, drawn off-screen into PNGs beside the page)."""

from __future__ import annotations

from pathlib import Path


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
