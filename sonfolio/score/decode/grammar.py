"""Decoding under the canonical grammar, every text a model writes valid: the one module the
score track's infer face hands the runtime (sonfolio.variants) and the app.

- `State` (sonfolio.score.decode.state): the grammar's parser read a piece at a time;
- `ctc_decode` (search): the CTC head read by a prefix beam search under the grammar, beside
  the greedy reading repaired (`repair`) or under another printed meter (`meter_refits`),
  the likeliest winning (`ctc_logp`);
- `GreedyConstraint`, `logits_processor` (constraint): greedy attention decoding under it;
- `Vocab`, `Carry`, `next_time` (vocab): a tokenizer's pieces, and the time signature carried
  from one system to the next.
"""

from __future__ import annotations

from sonfolio.score.decode.constraint import GreedyConstraint, logits_processor
from sonfolio.score.decode.repair import meter_refits, repair
from sonfolio.score.decode.search import CtcSearch, close_search_pools, ctc_decode, ctc_logp
from sonfolio.score.decode.state import State
from sonfolio.score.decode.vocab import Carry, Vocab, next_time

__all__ = [
    "Carry",
    "CtcSearch",
    "GreedyConstraint",
    "State",
    "Vocab",
    "accepts",
    "close_search_pools",
    "ctc_decode",
    "ctc_logp",
    "logits_processor",
    "next_time",
    "meter_refits",
    "repair",
]


def accepts(text: str, time: str | None = None) -> bool:
    """`canonical.is_canonical` by way of `State` (a character at a time): for the tests."""
    state: State | None = State.start(time)
    for ch in text:
        state = state.feed(ch)
        if state is None:
            return False
    return state.complete
