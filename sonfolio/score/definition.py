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

    def training(self, params):
        """How this track trains (a sonfolio.train.setup.Training): score_train, with the
        width the data step renders every system at (score_data.image_long_side), which is
        the model's input width."""
        from sonfolio.score.track import ScoreTraining

        return ScoreTraining(params.score_train, params.score_data.image_long_side)

    # --- qat ---

    def load_trained(self, folder):
        """The model train@score saved in `folder`, ready to train further (its CTC head
        attached where it reads with one)."""
        from sonfolio.score.model import load_trained

        return load_trained(folder)

    # --- export ---

    # --- bench ---

    # --- eval ---


TRACK = ScoreTrack()
