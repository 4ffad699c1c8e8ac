"""The auxiliary CTC loss: pooling encoder states per frame, and labels that cannot fit."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sonfolio.train.ctc import ctc_loss

BLANK, EOS = 0, 9


def _head() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 10)


def test_pool_averages_neighbouring_states_before_the_head():
    head = _head()
    states = torch.randn(2, 7, 4)  # an odd length: the last frame averages one state
    labels = torch.tensor([[1, 2, 3, EOS], [4, 4, EOS, -100]])
    pooled = torch.stack(
        [states[:, 0:2].mean(1), states[:, 2:4].mean(1), states[:, 4:6].mean(1), states[:, 6]],
        1,
    )
    got = ctc_loss(head, states, labels, BLANK, (EOS,), pool=2)
    want = ctc_loss(head, pooled, labels, BLANK, (EOS,), pool=1)
    torch.testing.assert_close(got, want)
    assert not torch.equal(got, ctc_loss(head, states, labels, BLANK, (EOS,), pool=1))


def test_labels_that_do_not_fit_the_pooled_frames_contribute_nothing():
    head = _head()
    states = torch.randn(2, 8, 4, requires_grad=True)
    # sample 0: 3 labels fit 4 pooled frames; sample 1: 5 labels (one repeat needs a blank
    # between) cannot fit 4 frames
    labels = torch.tensor([[1, 2, 3, EOS, -100, -100], [1, 2, 3, 3, 5, EOS]])
    loss = ctc_loss(head, states, labels, BLANK, (EOS,), pool=2)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(states.grad).all()
    assert states.grad[1].abs().sum() == 0  # the sample that cannot fit adds no gradient
    logp = head(F.avg_pool1d(states[:1].transpose(1, 2), 2, 2).transpose(1, 2))
    alone = F.ctc_loss(
        logp.log_softmax(-1).transpose(0, 1),
        torch.tensor([1, 2, 3]),
        torch.tensor([4]),
        torch.tensor([3]),
        blank=BLANK,
        reduction="mean",
    )
    torch.testing.assert_close(loss, alone / 2)  # "mean" over the batch: the other counts 0
