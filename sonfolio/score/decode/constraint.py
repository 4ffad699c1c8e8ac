"""Greedy attention decoding under the canonical grammar (`GreedyConstraint`): per step the
best-scoring token that keeps the prefix viable, the end token only when the prefix is
complete; the ORT loop (sonfolio.infer.ortloop.OrtGreedy) calls it each step, and
`logits_processor` wraps it for transformers' `generate`."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from sonfolio.score.decode.state import State
from sonfolio.score.decode.vocab import Vocab


class GreedyConstraint:
    """Constrained greedy choice for a batch decoded step by step (the ORT loop, HF generate).

    `choose(logits)` takes the step's (B, V) scores and returns the ids picked: per row the
    best-scoring token whose piece keeps the prefix viable, the end token only when the prefix
    is complete; a row with no allowed token ends. `finish(rows)` cuts a row that ended
    incomplete back to its last complete point (or to nothing). Counted in `stats`: complete,
    cut_back, empty.
    """

    def __init__(
        self,
        vocab: Vocab,
        times: Sequence[str | None] | None,
        batch: int,
        stats: Counter | None = None,
    ) -> None:
        self.vocab, self.eos = vocab, vocab.eos
        self.stats = Counter() if stats is None else stats
        self.states: list[State | None] = [
            State.start(None if times is None else times[b]) for b in range(batch)
        ]
        self.steps = [0] * batch  # tokens chosen per row
        self.complete_at = [0] * batch  # the length of the longest complete prefix
        self.done = [False] * batch

    def choose(self, logits: np.ndarray) -> np.ndarray:
        picks = np.full(len(self.states), self.eos, dtype=np.int64)
        for b, state in enumerate(self.states):
            if self.done[b]:
                continue
            row = logits[b]
            pick = self._best(state, row, int(row.argmax()))
            if pick is None:
                pick = next(
                    (c for c in np.argsort(-row, kind="stable").tolist() if self._ok(state, c)),
                    self.eos,
                )
            picks[b] = pick
            if pick == self.eos:
                self.done[b] = True
                continue
            self.states[b] = state.step(self.vocab, pick)
            self.steps[b] += 1
            if self.states[b].complete:
                self.complete_at[b] = self.steps[b]
        return picks

    def _best(self, state: State, row: np.ndarray, top: int) -> int | None:
        return top if np.isfinite(row[top]) and self._ok(state, top) else None

    def _ok(self, state: State, token: int) -> bool:
        if token == self.eos:
            return state.complete
        return state.step(self.vocab, token) is not None

    def finish(self, rows: list[list[int]]) -> list[list[int]]:
        """Rows (the chosen ids, end token and padding included or not) cut to their last
        complete point where they did not end complete."""
        out = []
        for b, ids in enumerate(rows):
            ids = [i for i in ids if i != self.eos][: self.steps[b]]
            if self.complete_at[b] < len(ids) or not ids:
                ids = ids[: self.complete_at[b]]
                self.stats["empty" if not ids else "cut_back"] += 1
            else:
                self.stats["complete"] += 1
            out.append(ids)
        return out


def logits_processor(constraint: GreedyConstraint) -> Any:
    """A transformers LogitsProcessor applying `constraint` inside `model.generate` (greedy):
    every score but the chosen token's is set to -inf."""
    import torch
    from transformers import LogitsProcessor

    class _Processor(LogitsProcessor):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            # generate calls this once a step with the ids so far (the start token first); the
            # constraint already advanced its states by the token it chose last step
            picks = constraint.choose(scores.float().cpu().numpy())
            out = torch.full_like(scores, -math.inf)
            rows = torch.arange(len(picks), device=scores.device)
            out[rows, torch.as_tensor(picks, device=scores.device)] = 0.0
            return out

    return _Processor()
