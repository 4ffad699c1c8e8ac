"""What a report page is made of: sections of tables, figures, galleries and missing inputs.

The template (sonfolio/templates/report.html.j2) draws each item by its `kind`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


def fmt(value: Any, digits: int = 4) -> str:
    """A metric as a table cell reads it: — for none, yes / no, thousands separated."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):  # 4 significant digits, no exponent for large values
        return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"
    return str(value)
