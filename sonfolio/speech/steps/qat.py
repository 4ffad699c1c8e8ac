"""qat@speech: the fine-tuned Whisper reloaded to train further (sonfolio.faces.QatFace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class SpeechQatFace:
    name = "speech"

    def load_trained(self, folder: Path) -> Any:
        """The model train@speech saved in `folder`, ready to train further."""
        from transformers import WhisperForConditionalGeneration

        return WhisperForConditionalGeneration.from_pretrained(str(folder))


FACE = SpeechQatFace()
