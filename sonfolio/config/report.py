"""The params section `report`, and what the report stage reads."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sonfolio.config.base import Strict
from sonfolio.config.sections import Sections


class Report(Strict):
    """Stage report: one HTML page per run from the stages' outputs (docs/report.md)."""

    title: Annotated[str, Field(min_length=1)]
    sample_variant: Annotated[str, Field(min_length=1)]  # whose eval samples are shown
    score_samples: Annotated[int, Field(ge=0, le=50)]  # side-by-side images per kind and split
    speech_worst: Annotated[int, Field(ge=0, le=100)]  # worst clips per split, with audio
    dpi: Annotated[int, Field(ge=50, le=300)]  # resolution of the plots


class ReportParams(Sections):
    """What stage report reads: `report` (and paths, as every stage)."""

    report: Report
