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

    # --- qat ---

    # --- export ---

    # --- bench ---

    # --- eval ---


TRACK = SpeechTrack()
