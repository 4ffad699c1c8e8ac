"""Benchmarks: each script writes JSON under benchmarks/results/ and prints a table."""

from __future__ import annotations

from rich.console import Console


def console(min_width: int = 120) -> Console:
    """A console at least `min_width` columns wide: rich falls back to 80 when the output is
    not a terminal (a log file, CI), which cuts the tables' columns."""
    return Console(width=max(Console().width, min_width))
