"""Stage report: one self-contained HTML report of the run, from every stage's outputs.

Run:    dvc repro report      (or: python -m tasks.report)
Reads:  params.yaml (report, paths), ${paths.metrics}/<track>_{train,qat,export,bench,eval}.json,
        ${paths.metrics}/estimate_<track>.json (the estimate stage),
        ${paths.live}/<track>_train/plots/metrics/ (DVCLive curves),
        ${paths.track("score").eval}/samples/ (side-by-side PNGs), the speech clips the eval names
Writes: ${paths.report}/index.html, ${paths.report}/assets/ (plots, copied samples and audio,
        summary.json for the Prefect artifacts), ${paths.report}/<track>_latency.csv (dvc plots)

A missing input is not an error: the page shows "not yet produced: run `dvc repro <stage>`"
in its place (docs/report.md).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sonfolio.config.report import Report, ReportParams
from sonfolio.config.stage import load_sections
from sonfolio.logs import setup_logging
from sonfolio.report.page import write_report
from sonfolio.report.sources import Sources

log = logging.getLogger(__name__)

STAGE = "report"


def run(cfg: Report, sources: Sources, out: Path) -> dict[str, Any]:
    """Write the report into `out`; returns its summary.

    Built in a temporary folder, then each output replaces its old copy, index.html last. Not
    the whole folder: it also holds the .gitignore that DVC writes for these outputs.
    """
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".report.tmp-") as tmp:
        summary = write_report(cfg, sources, Path(tmp))
        for entry in sorted(Path(tmp).iterdir(), key=lambda p: p.name == "index.html"):
            dest = out / entry.name
            if dest.is_dir():
                shutil.rmtree(dest)
            entry.replace(dest)
    log.info(
        "report: %s (%d sections, %d images, %d inputs not yet produced)",
        out / "index.html",
        summary["sections"],
        summary["images"],
        len(summary["missing"]),
    )
    return summary


def main() -> None:
    setup_logging()
    params = load_sections(ReportParams)
    paths = params.paths
    sources = Sources(
        metrics=paths.metrics,
        live=paths.live,
        evals={name: paths.track(name).eval for name in paths.tracks},
        root=Path.cwd(),
    )
    run(params.report, sources, paths.report)


if __name__ == "__main__":
    main()
