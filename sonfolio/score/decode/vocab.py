"""A tokenizer's pieces as text for the grammar's `State.step`, and the time signature
carried from one system to the next while a page is decoded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sonfolio.score.common import canonical as cn


class Vocab:
    """A tokenizer's pieces as text, for `State.step` (built once per tokenizer).

    `pieces[id]` is the exact text the id decodes to (the byte-level decoder's output for the
    id alone; "Ġfis''4." reads " fis''4."); None for the special tokens, which never stand in a
    text. A piece holding a byte that is not ASCII decodes to U+FFFD, which no text allows.
    """

    def __init__(self, tokenizer: Any) -> None:
        special = set(tokenizer.all_special_ids)
        self.pieces: list[str | None] = [
            None
            if i in special
            else tokenizer.decode(
                [i], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            for i in range(len(tokenizer))
        ]
        self.eos: int = tokenizer.eos_token_id
        self.blank: int | None = tokenizer.pad_token_id
        self._tokenizer = tokenizer
        self.key = hash(tuple(self.pieces))  # names its search pool (one per vocabulary)

    def text(self, ids: Sequence[int]) -> str:
        return "".join(p for i in ids if (p := self.pieces[i]) is not None)

    def ids(self, text: str) -> list[int]:
        """The tokenizer's own ids for `text` (no special tokens)."""
        return self._tokenizer(text, add_special_tokens=False)["input_ids"]


@dataclass(frozen=True)
class Carry:
    """Decode rows in order, each in the time in force after the one before (a page's systems
    top to bottom): `start` is the first row's time."""

    start: str | None = None


def next_time(text: str, time: str | None) -> str | None:
    """The time in force after a system read in `time`: canonical.time_after for a valid
    text; an invalid one tells nothing reliable, so `time` carries on."""
    try:
        return cn.time_after(text, time)
    except cn.CanonicalError:
        return time
