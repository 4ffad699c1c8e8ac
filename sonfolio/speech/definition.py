"""The speech track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("speech"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations


class SpeechTrack:
    """The speech track."""

    name = "speech"

    # --- data ---

    # --- tokenizer ---

    # --- train ---

    def training(self, params):
        """How this track trains (a sonfolio.train.setup.Training): speech_train."""
        from sonfolio.speech.track import SpeechTraining

        return SpeechTraining(params.speech_train)

    # --- qat ---

    def load_trained(self, folder):
        """The model train@speech saved in `folder`, ready to train further."""
        from transformers import WhisperForConditionalGeneration

        return WhisperForConditionalGeneration.from_pretrained(str(folder))

    # --- export ---

    # --- bench ---

    # --- eval ---


TRACK = SpeechTrack()
