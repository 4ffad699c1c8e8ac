"""The sections of params.yaml that `sonfolio read`, `transcribe` and `serve` read.

Like a stage (sonfolio.config.sections), an inference command validates only what it uses, so
that a training section written for another version of the project does not stop it and the
schemas of the pipeline's sections are not built at start-up (`sonfolio transcribe` on a short
clip is measured from a cold process: benchmarks/longform.py's startup row).
`sonfolio check-params` still validates the whole file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sonfolio.config.infer import Infer
from sonfolio.config.sections import Sections
from sonfolio.config.serve import Serve


class InferParams(Sections):
    """`paths` (where the default models are) and `infer`."""

    infer: Infer


class LilyPondOnly(BaseModel):
    """Of `score_data`, the one key `sonfolio serve` reads: the LilyPond its page engraves the
    readings with (the rest of the section is the data stage's, left unread)."""

    model_config = ConfigDict(extra="ignore")
    lilypond: str | None = None


class ServeParams(InferParams):
    """`sonfolio serve`'s: `read`'s and `transcribe`'s, `serve`, and `score_data.lilypond`."""

    serve: Serve
    score_data: LilyPondOnly
