"""The sections of params.yaml that `sonfolio read` and `sonfolio transcribe` read.

Like a stage (sonfolio.config.sections), an inference command validates only what it uses, so
that a training section written for another version of the project does not stop it and the
schemas of the pipeline's sections are not built at start-up (`sonfolio transcribe` on a short
clip is measured from a cold process: benchmarks/longform.py's startup row).
`sonfolio check-params` still validates the whole file.
"""

from __future__ import annotations

from sonfolio.config.infer import Infer
from sonfolio.config.sections import Sections


class InferParams(Sections):
    """`paths` (where the default models are) and `infer`."""

    infer: Infer
