"""Sonfolio: sheet music and French speech to text, from raw data to a quantized model."""

from __future__ import annotations

import logging

# Log lines that third-party packages print on every run and that no user can act on. They are
# dropped here, at the one place every entry point imports first, and nowhere else; every other
# warning (those that ask the user to do something) still shows.
# - torchao, at import: its CUDA-only kernels (MXFP8, SM90a CUTLASS) do not load into a CPU or
#   ROCm build of torch; nothing the project runs needs them there.
# - torch, at torchao's import: torchao still registers Enum classes with pytree, which torch
#   now calls deprecated (torchao's to change, not ours).
# - Accelerate, at every checkpoint: a tied weight (Whisper's proj_out = embed_tokens) is saved
#   once; the tie comes back from the config on load (the resume tests check the weights).
_UNACTIONABLE = {
    "torchao": ("Failed to load", "_C_"),
    "torch.utils._pytree": ("is an Enum subclass and is now natively supported",),
    "accelerate.utils.other": ("Removed shared tensor",),
}


class _DropUnactionable(logging.Filter):
    def __init__(self, parts: tuple[str, ...]) -> None:
        super().__init__()
        self.parts = parts

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not all(part in message for part in self.parts)


for _name, _parts in _UNACTIONABLE.items():
    logging.getLogger(_name).addFilter(_DropUnactionable(_parts))
