"""Decoding under the canonical grammar: the incremental state agrees with `validate` on whole
texts and catches a bad token when it completes; constrained CTC and attention decoding always
give texts that validate, leave a valid greedy reading untouched, and run through
`Variant.generate` on a tiny model in torch and ONNX Runtime."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_tiny import SHAPE, export, save_score  # tests/ is on sys.path
from score.test_canonical import BAD, GOOD

from sonfolio import variants
from sonfolio.score import canonical
from sonfolio.score.constrained import (
    Carry,
    GreedyConstraint,
    State,
    Vocab,
    accepts,
    ctc_decode,
    next_time,
)
from sonfolio.score.synth import synth_systems
from sonfolio.tokenizer import train_bpe

TIMES = [None, "3/4", "4/4", "6/8", "2/2"]
CHARS = "abcdefgis',.~<>|{}/\\r0123456789 *"


@pytest.fixture(scope="module")
def systems() -> list[tuple[str, str | None]]:
    """(text, time in force) of synthetic systems (continuations included) and the grammar
    tests' own texts."""
    synth = [(s.text, s.time) for s in synth_systems(120, 3, 4)]
    return synth + [(t, None) for t in GOOD] + [(b[0], None) for b in BAD]


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    texts = [s.text for s in synth_systems(200, 5, 4)] + GOOD
    return Vocab(train_bpe(texts, 400, 2, 256))


def _mutate(rng: random.Random, text: str) -> str:
    """Drop, repeat or swap a token, or insert, drop or replace a character."""
    toks = text.split(" ")
    kind = rng.randrange(6)
    if kind == 0 and len(toks) > 1:
        del toks[rng.randrange(len(toks))]
    elif kind == 1:
        toks.insert(rng.randrange(len(toks) + 1), rng.choice(toks))
    elif kind == 2 and len(toks) > 1:
        i, j = rng.randrange(len(toks)), rng.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
    elif kind >= 3:
        i = rng.randrange(len(text) + 1)
        new = rng.choice(CHARS)
        return {3: text[:i] + new + text[i:], 4: text[:i] + text[i + 1 :]}.get(
            kind, text[:i] + new + text[i + 1 :]
        )
    return " ".join(toks)


def test_agrees_with_validate_on_the_grammar_tests_texts():
    for text in GOOD + [b[0] for b in BAD]:
        assert accepts(text) == canonical.is_canonical(text), text


def test_agrees_with_validate_on_synthetic_systems_and_their_mutations(systems):
    rng = random.Random(0)
    checked = Counter()
    for text, time in systems:
        assert accepts(text, time) == canonical.is_canonical(text, time), (text, time)
        for _ in range(12):
            mutated = _mutate(rng, _mutate(rng, text) if rng.random() < 0.3 else text)
            for t in (time, rng.choice(TIMES)):
                valid = canonical.is_canonical(mutated, t)
                assert accepts(mutated, t) == valid, (mutated, t)
                checked[valid] += 1
    assert checked[True] > 100 and checked[False] > 2000  # both sides exercised


def test_every_prefix_of_a_valid_text_is_viable(systems):
    for text, time in systems[:60]:
        state = State.start(time)
        for i, ch in enumerate(text):
            state = state.feed(ch)
            assert state is not None, (text[: i + 1], time)
            assert state.complete == (i == len(text) - 1) or canonical.is_canonical(
                text[: i + 1], time
            )


def _dies_at(text: str, time: str | None) -> int | None:
    state = State.start(time)
    for i, ch in enumerate(text):
        state = state.feed(ch)
        if state is None:
            return i
    return None


def _detected_by(text: str, err: canonical.CanonicalError) -> int | None:
    """The last character of the token after which `validate` knew the text is bad: its
    error's token; the argument of a restated change; a chord's closing token (its errors
    name the chord's first token). None: the text merely ends too early."""
    toks = text.split(" ")
    j = err.index
    if err.token == "<end>" or j >= len(toks) - 1:
        return None  # the last token is partial: an approximate check is allowed there
    if "restates" in err.why:
        j += 2 if toks[j] == "\\key" else 1
    elif "chord" in err.why:
        j = next((k for k in range(j, len(toks)) if ">" in toks[k]), len(toks) - 1)
    if j >= len(toks) - 1:
        return None
    return sum(len(t) + 1 for t in toks[: j + 1])  # the space that completes token j


def test_a_completed_bad_token_is_caught_at_once(systems):
    rng = random.Random(1)
    caught = 0
    for text, time in systems:
        for _ in range(8):
            mutated = _mutate(rng, text)
            try:
                canonical.validate(mutated, time)
                continue
            except canonical.CanonicalError as err:
                bound = _detected_by(mutated, err)
            if bound is None:
                continue
            dies = _dies_at(mutated, time)
            assert dies is not None and dies <= bound, (mutated, time, dies, bound)
            caught += 1
    assert caught > 300


def test_an_invalid_time_is_refused_as_validate_refuses_it():
    with pytest.raises(ValueError, match="not a time signature"):
        State.start("3/5")


def _random_ctc_logits(rng: np.random.Generator, batch: int, frames: int, size: int, blank: int):
    logits = rng.normal(0.0, 2.0, (batch, frames, size)).astype(np.float32)
    logits[:, :, blank] += rng.choice([6.0, -2.0], (batch, frames), p=[0.6, 0.4])
    return logits


@pytest.mark.parametrize("times", [None, ["3/4", "6/8", None, "4/4"]])
def test_constrained_ctc_on_random_logits_always_validates(vocab, times):
    rng = np.random.default_rng(0)
    blank = vocab.blank
    stats = Counter()
    logits = _random_ctc_logits(rng, 4, 120, len(vocab.pieces), blank)
    rows = ctc_decode(logits, vocab, blank, times, 200, stats=stats)
    for b, ids in enumerate(rows):
        time = None if times is None else times[b]
        canonical.validate(vocab.text(ids), time)
    assert stats["searched"] == 4  # random greedy readings never validate


def test_constrained_ctc_carries_the_time_from_row_to_row(vocab):
    rng = np.random.default_rng(2)
    logits = _random_ctc_logits(rng, 3, 100, len(vocab.pieces), vocab.blank)
    rows = ctc_decode(logits, vocab, vocab.blank, Carry("3/8"), 200)
    time = "3/8"
    for ids in rows:
        canonical.validate(vocab.text(ids), time)
        time = next_time(vocab.text(ids), time)


def _tokens(vocab: Vocab, text: str) -> list[int]:
    """Ids whose pieces spell `text`, longest piece first (any split the tokenizer could make)."""
    by_piece = {p: i for i, p in enumerate(vocab.pieces) if p}
    ids, at = [], 0
    while at < len(text):
        piece = max((p for p in by_piece if text.startswith(p, at)), key=len)
        ids.append(by_piece[piece])
        at += len(piece)
    return ids


def test_a_valid_greedy_ctc_reading_is_returned_unchanged(vocab):
    text, time = r"\clef bass \key f \major c4 d4 | e2", "2/4"
    ids = _tokens(vocab, text)
    logits = np.zeros((1, 2 * len(ids) + 1, len(vocab.pieces)), dtype=np.float32)
    logits[0, :, vocab.blank] = 5.0
    for k, i in enumerate(ids):
        logits[0, 2 * k + 1, i] = 10.0  # each symbol on its own frame, blanks between
    stats = Counter()
    assert ctc_decode(logits, vocab, vocab.blank, [time], 200, stats=stats) == [ids]
    assert stats == Counter(greedy_valid=1)


def _attend(vocab: Vocab, logits: np.ndarray, times) -> tuple[list[list[int]], Counter]:
    """The greedy loop of sonfolio.infer.ortloop with a constraint, on fixed logits (B, S, V)."""
    stats = Counter()
    c = GreedyConstraint(vocab, times, len(logits), stats)
    rows: list[list[int]] = [[] for _ in logits]
    for step in range(logits.shape[1]):
        for b, pick in enumerate(c.choose(logits[:, step].copy())):
            rows[b].append(int(pick))
        if all(c.done):
            break
    return c.finish(rows), stats


@pytest.mark.parametrize("times", [None, ["3/4", None, "6/8"]])
def test_constrained_attention_on_random_logits_always_validates(vocab, times):
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 3.0, (3, 160, len(vocab.pieces))).astype(np.float32)
    logits[:, :, vocab.eos] += 4.0  # ends now and then, when the grammar lets it
    rows, _ = _attend(vocab, logits, times)
    for b, ids in enumerate(rows):
        canonical.validate(vocab.text(ids), None if times is None else times[b])


def test_a_valid_greedy_attention_reading_is_returned_unchanged(vocab):
    text = r"\clef treble \key g \major \time 3/4 d'4 g'4 b'4 | d''2."
    ids = _tokens(vocab, text)
    logits = np.random.default_rng(1).normal(0.0, 1.0, (1, len(ids) + 1, len(vocab.pieces)))
    for k, i in enumerate([*ids, vocab.eos]):
        logits[0, k, i] = 20.0
    rows, stats = _attend(vocab, logits.astype(np.float32), None)
    assert rows == [ids] and stats == Counter(complete=1)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny attention model (torch and ONNX), and the same with a CTC head (torch and ONNX,
    its head as the encoder's ctc_logits output, as the export stage writes it)."""
    from sonfolio.ctc_format import HEAD_FILE
    from sonfolio.export.fp32 import add_ctc_output
    from sonfolio.export.layout import ENCODER
    from sonfolio.score.model import load_trained
    from sonfolio.train import ctc

    root = tmp_path_factory.mktemp("constrained")
    texts = [s.text for s in synth_systems(16, 7, 2)]
    attention = save_score(root / "attention", texts=texts, max_length=128)
    shutil.copytree(attention, root / "ctc")
    model = load_trained(root / "ctc")
    ctc.set_decoding(model, "ctc")
    torch.manual_seed(1)
    head = ctc.attach(model)
    with torch.no_grad():
        head.weight.normal_(0.0, 0.2)
        head.bias[model.config.pad_token_id] = 1.0
    ctc.save_pretrained(model, root / "ctc")
    out = {"attention": attention, "ctc": root / "ctc"}
    for name in ("attention", "ctc"):
        out[f"{name}_onnx"] = export(out[name], root / f"{name}_onnx", "image-to-text-with-past")
    add_ctc_output(out["ctc_onnx"] / ENCODER, out["ctc"] / HEAD_FILE)
    return out


@pytest.mark.parametrize("name", ["attention", "attention_onnx", "ctc", "ctc_onnx"])
def test_a_tiny_model_reads_valid_texts_through_variant_generate(tiny_models, name):
    v = variants.load(tiny_models[name], threads=1, device="cpu")
    pixels = torch.rand((3, 1, *SHAPE), generator=torch.Generator().manual_seed(0))
    times = ["3/4", None, "2/4"]
    texts = v.generate(pixels, 48, times=times, constrained=True)
    for text, time in zip(texts, times, strict=True):
        assert text == "" or canonical.is_canonical(text, time), text
    stats = v.decode_stats  # every row accounted for
    if name.startswith("attention"):
        assert stats["complete"] + stats["cut_back"] + stats["empty"] == 3
        assert all(texts), "an untrained decoder still writes something valid"
    else:  # 17 frames of an untrained head that emits garbage everywhere: nothing valid fits
        assert stats["greedy_valid"] + stats["searched"] == 3
        assert stats["empty"] == texts.count("")
    carried = v.generate(pixels, 48, times=Carry("3/4"), constrained=True)
    time = "3/4"
    for text in carried:
        assert text == "" or canonical.is_canonical(text, time), text
        time = next_time(text, time)
