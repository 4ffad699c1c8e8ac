"""The order training reads its samples in: a pure function of (seed, epoch, position).

So a resumed run (after a crash, `dvc repro` again) sees exactly the batches the interrupted
one would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from transformers.trainer_pt_utils import get_length_grouped_indices


class EpochBatches:
    """Micro-batches of sample indices in a seeded order per epoch, cut to whole optimizer
    steps (`group` = micro-batches per step over all processes); `start` skips the first ones.
    Accelerate's BatchSamplerShard hands batch i to process i % world_size.

    With `lengths`, each micro-batch holds samples of like length (transformers'
    get_length_grouped_indices, as its Trainer's group_by_length: shuffled, then sorted within
    mega-batches of 50 micro-batches): the decoder pads to each batch's longest label, so this
    cuts the padded tokens it computes. Order stays seeded per epoch, so resume is exact."""

    drop_last = True

    def __init__(
        self, size: int, batch_size: int, group: int, seed: int, lengths: list[int] | None = None
    ) -> None:
        self.size, self.batch_size, self.group, self.seed = size, batch_size, group, seed
        self.lengths = lengths
        self.epoch, self.start = 0, 0
        self.per_epoch = size // batch_size // group * group
        if self.per_epoch == 0:
            raise ValueError(
                f"{size} train samples are fewer than one optimizer step "
                f"({group} x {batch_size}): lower effective_batch or add data"
            )

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        if self.lengths is None:
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = get_length_grouped_indices(self.lengths, self.batch_size, generator=generator)
        for i in range(self.start, self.per_epoch):
            yield order[i * self.batch_size : (i + 1) * self.batch_size]

    def __len__(self) -> int:
        return self.per_epoch - self.start
