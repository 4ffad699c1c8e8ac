"""score_train.jitter: each train batch's images moved a little, afresh every step, never
losing the ink at their edges (the images are cropped to it)."""

from __future__ import annotations

from pathlib import Path

import torch

from sonfolio.config.params import load_params
from sonfolio.score.model.batches import jitter

ROOT = Path(__file__).resolve().parents[2]


def _cfg(**update):
    cfg = load_params(ROOT / "params.yaml").score_train.jitter
    return cfg.model_copy(update={"enabled": True, **update})


def _batch() -> dict:
    x = torch.zeros(6, 1, 96, 640)
    x[:, :, 20:76, -2:] = 1.0  # a final bar line on the image's last columns
    x[:, :, 20:76, :2] = 1.0  # and the staff's start on its first
    x[:, :, 40, :] = 1.0  # a staff line across
    return {"pixel_values": x, "labels": torch.ones(6, 5, dtype=torch.long)}


def test_off_changes_nothing():
    assert jitter(_cfg(enabled=False)) is None


def test_each_step_draws_afresh_and_a_seed_repeats_it():
    change = jitter(_cfg())
    torch.manual_seed(0)
    first = change(_batch())
    second = change(_batch())
    torch.manual_seed(0)
    again = change(_batch())
    assert not torch.equal(first["pixel_values"], second["pixel_values"])
    assert torch.equal(first["pixel_values"], again["pixel_values"])
    assert first["labels"] is not None and torch.equal(first["labels"], _batch()["labels"])


def test_the_ink_at_the_edges_stays_in_the_image():
    change = jitter(_cfg(scale=0.3, shift_px=32, rotate_deg=0.3, noise_std=0.0, fade=0.0))
    torch.manual_seed(1)
    for _ in range(20):
        x = change(_batch())["pixel_values"]
        assert x.shape == (6, 1, 96, 640) and float(x.min()) >= 0.0 and float(x.max()) <= 1.0
        # both end lines still drawn: a column near each side holds most of a line's ink
        ends = x[:, 0, 10:86, :].sum(1)  # (6, 640): ink per column
        assert (ends[:, :330].max(1).values > 30).all()
        assert (ends[:, 330:].max(1).values > 30).all()
        assert (ends[:, :330].argmax(1) < ends[:, 330:].argmax(1) + 330).all()
