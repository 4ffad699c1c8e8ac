"""Local `evaluate` metric modules (wer/, cer/) that load offline; `load` finds them.

They are folders, not imported modules: `evaluate.load(path)` copies the script into its
module cache and imports it from there (the hub's "wer" and "cer" need the network).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import evaluate

METRICS = ("wer", "cer")


def load(name: str) -> Any:
    """The `evaluate` metric `name` ("wer" or "cer") from this package's folder."""
    if name not in METRICS:
        raise ValueError(f"unknown speech metric {name!r}; known: {METRICS}")
    return evaluate.load(str(Path(__file__).parent / name))
