"""The report page: its parts built from every section, rendered to HTML and to markdown.

write_report is the report's entry point (tasks/report.py): index.html, the plots and copied
samples under assets/, and assets/summary.json, the tables as markdown for the Prefect flow.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio import tracks
from sonfolio.report.conditions import conditions_section
from sonfolio.report.cost import cost_section
from sonfolio.report.items import Media, Missing, Section, Table
from sonfolio.report.qat_vs_ptq import qat_section
from sonfolio.report.quality import eval_section
from sonfolio.report.sources import Sources
from sonfolio.report.speed import bench_section
from sonfolio.report.training import training_section

if TYPE_CHECKING:
    from sonfolio.config.report import Report

log = logging.getLogger(__name__)

SUMMARY = "assets/summary.json"  # the page's tables as markdown, for the Prefect artifacts


def build(cfg: Report, src: Sources, out: Path) -> dict[str, list[Section]]:
    """Every section, its plots and copied samples written under `out`; keyed by page part."""
    (out / "assets").mkdir(parents=True, exist_ok=True)
    page: dict[str, list[Section]] = {}
    for name in src.tracks:
        track = tracks.face(name, "report")  # what the sections ask of it
        page[name] = [
            training_section(track, src, out, cfg),
            eval_section(track, src, out, cfg),
            bench_section(track, src, out, cfg),
            qat_section(track, src),
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
