"""The ORT-loop runtime of the bench: an ONNX variant through our plain greedy loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sonfolio import prompt
from sonfolio.bench.case import Spec
from sonfolio.ctc_format import folder_decoding
from sonfolio.infer.ortloop import OrtCtc, OrtGreedy


class LoopRuntime(OrtGreedy):
    """OrtGreedy as a bench runtime, configured from a Spec; its prompt (start token, a
    Whisper's language and task tokens, suppressed tokens) read from the variant's folder.

    Raises:
        prompt.PromptError, prompt.UnsupportedDecoding: the folder's generation config gives
            no prompt the loop decodes from (the message says why).
    """

    def __init__(self, spec: Spec) -> None:
        folder = Path(spec.case.folder)
        super().__init__(
            folder, spec.threads, spec.decoder_threads, spec.spin_wait, prompt.read(folder)
        )


def loop_runtime(spec: Spec) -> Any:
    """Our loop: OrtCtc for a model read by its CTC head, else the greedy decoder loop."""
    reads, blank = folder_decoding(Path(spec.case.folder))
    if reads:
        return OrtCtc.open(Path(spec.case.folder), spec.threads, spec.spin_wait, blank)
    return LoopRuntime(spec)
