"""The score track's definition: what is specific to it, for the steps that take a track.

One object, `TRACK`, found by name through sonfolio.tracks.get("score"). Each step asks it for
what only this track knows; imports are inside the methods so that loading the definition
stays cheap and a step pulls in only what it uses.
"""

from __future__ import annotations


class ScoreTrack:
    """The score track."""

    name = "score"

    # --- data ---

    # --- tokenizer ---

    # --- train ---

    # --- qat ---

    # --- export ---

    # --- bench ---

    # --- eval ---


TRACK = ScoreTrack()
