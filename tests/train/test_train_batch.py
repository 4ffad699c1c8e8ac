"""Automatic micro-batch size: the largest that runs a real step under a memory cap, cached."""

from __future__ import annotations

import torch
from torch import nn

from sonfolio.train.batch import auto_micro_batch, divisors_down

CAP = 12  # samples that "fit" in the simulated device memory


class CappedModel(nn.Module):
    """A real model whose forward fails as CUDA does when a batch exceeds the memory cap."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > CAP:
            raise RuntimeError(
                "CUDA out of memory. Tried to allocate 2.00 GiB (simulated memory cap)"
            )
        return self.layer(x).square().mean()


def test_largest_divisor_under_the_cap_then_cached(tmp_path):
    model = CappedModel()
    tried: list[int] = []

    def step(n: int) -> None:
        tried.append(n)
        model(torch.randn(n, 16)).backward()
        model.zero_grad()

    cache = tmp_path / "micro_batch.json"
    size, reason = auto_micro_batch(step, 32, cache, "dev|model|shape")
    assert size == 8  # divisors of 32 halving: 32, 16 fail; 8 is the largest that fits
    assert tried == [32, 16, 8]
    assert "real step" in reason and cache.is_file()
    tried.clear()
    assert auto_micro_batch(step, 32, cache, "dev|model|shape")[0] == 8
    assert tried == []  # from the cache, no probing
    assert auto_micro_batch(step, 24, cache, "dev|other")[0] == 12
    assert tried == [24, 12]


def test_probing_leaves_the_training_rng_alone(tmp_path):
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    auto_micro_batch(lambda n: torch.rand(n), 8, tmp_path / "c.json", "k")
    assert torch.equal(torch.rand(1), expected)


def test_divisors():
    assert divisors_down(12) == [12, 6, 4, 3, 2, 1]


def test_length_grouped_batches_pad_less_and_cover_the_epoch():
    from sonfolio.train.order import EpochBatches

    rng = torch.Generator().manual_seed(1)
    lengths = torch.randint(5, 90, (640,), generator=rng).tolist()
    grouped = EpochBatches(640, 8, 2, seed=0, lengths=lengths)
    shuffled = EpochBatches(640, 8, 2, seed=0)

    def padded(sampler: EpochBatches) -> int:  # tokens the decoder computes, padding included
        return sum(len(b) * max(lengths[i] for i in b) for b in sampler)

    batches = list(grouped)
    assert sorted(i for b in batches for i in b) == list(range(640))  # each sample once
    assert padded(grouped) < 0.75 * padded(shuffled)
    assert batches == list(EpochBatches(640, 8, 2, seed=0, lengths=lengths))  # seeded
    grouped.epoch = 1
    assert list(grouped) != batches  # a new order each epoch
    grouped.epoch, grouped.start = 0, 5  # resuming mid-epoch skips the batches already done
    assert list(grouped) == batches[5:]
