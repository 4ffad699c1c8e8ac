"""Shared fixtures of the score tests: a BPE vocabulary trained on synthetic systems and the
grammar tests' texts, for the grammar state's tests and the constrained decoders'."""

from __future__ import annotations

import pytest
from score.test_canonical import GOOD  # tests/ is on sys.path

from sonfolio.score.data.synth import synth_systems
from sonfolio.score.decode.grammar import Vocab
from sonfolio.tokenizer import train_bpe


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    texts = [s.text for s in synth_systems(200, 5, 4)] + GOOD
    return Vocab(train_bpe(texts, 400, 2, 256))
