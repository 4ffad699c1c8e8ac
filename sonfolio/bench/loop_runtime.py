"""The ORT-loop runtime of the bench: an ONNX variant through our plain greedy loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sonfolio.bench.case import Spec
from sonfolio.ctc_format import folder_decoding
from sonfolio.infer.ortloop import OrtCtc, OrtGreedy


class LoopRuntime(OrtGreedy):
    """OrtGreedy as a bench runtime, configured from a Spec."""

    def __init__(self, spec: Spec) -> None:
        super().__init__(
            Path(spec.case.folder),
            spec.threads,
            spec.decoder_threads,
            spec.spin_wait,
            spec.prompt[0],
            spec.eos_id,
        )


def loop_runtime(spec: Spec) -> Any:
    """Our loop: OrtCtc for a model read by its CTC head, else the greedy decoder loop."""
    reads, blank = folder_decoding(Path(spec.case.folder))
    if reads:
        return OrtCtc.open(Path(spec.case.folder), spec.threads, spec.spin_wait, blank)
    return LoopRuntime(spec)
