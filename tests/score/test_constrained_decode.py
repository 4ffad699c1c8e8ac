"""Decoding under the canonical grammar: constrained CTC and attention decoding on random
logits always give texts that validate, in one process or spread over several, and leave a valid
greedy reading untouched; `repair` keeps a greedy reading and makes it valid, the likelier of the
search and the repair is read, the search's cut-back closes a slur whose end was missed, a
misread meter gives way to the meters the bars fill and the time carries from row to row; tiny
models read valid texts through `Variant.generate` in torch and ONNX Runtime; `ctc_logp` is
torch's ctc_loss negated. The grammar state itself: tests/score/test_constrained.py."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_tiny import SHAPE, export, save_score  # tests/ is on sys.path

from sonfolio import variants
from sonfolio.score.common import canonical
from sonfolio.score.data.synth import synth_systems
from sonfolio.score.decode import grammar as constrained
from sonfolio.score.decode import search
from sonfolio.score.decode.grammar import (
    Carry,
    GreedyConstraint,
    Vocab,
    ctc_decode,
    meter_refits,
    next_time,
    repair,
)


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


def test_searches_spread_over_processes_read_as_one_process_does(vocab):
    # the eval stage spreads a batch's searches (score_eval.search_workers): same texts, same
    # counts, rows in their order, and the workers stop when asked
    rng = np.random.default_rng(5)
    logits = _random_ctc_logits(rng, 5, 90, len(vocab.pieces), vocab.blank)
    valid = _tokens(vocab, r"\clef bass \key f \major c4 d4 | e2")
    logits[2] = -5.0
    logits[2, :, vocab.blank] = 5.0
    for k, i in enumerate(valid):  # row 2 reads validly by itself: never sent to a worker
        logits[2, 2 * k + 1, i] = 10.0
    times = ["3/4", None, "2/4", "6/8", None]
    one, two = Counter(), Counter()
    try:
        alone = ctc_decode(logits, vocab, vocab.blank, times, 200, stats=one)
        spread = ctc_decode(logits, vocab, vocab.blank, times, 200, stats=two, workers=2)
        assert search._POOLS  # the searches did go to worker processes
    finally:
        constrained.close_search_pools()
    assert spread == alone
    assert spread[2] == valid
    assert two == one and one["searched"] == 4 and one["greedy_valid"] == 1
    assert not search._POOLS


# greedy readings of the default model that the grammar refuses (a short bar, a note without
# its duration, `\bar` for `|`, a second key mode), the time in force, and what repair makes
REPAIRS = [
    (
        r"\clef bass \key c \major d'2 \fermata c'4 | d'4 d'4 bes4 | d'2 \fermata r4 d'4 | g4 d'4",
        "4/4",
        r"\clef bass \key c \major d'2 \fermata c'2 | d'4 d'4 bes2 | d'2 \fermata r4 d'4 | g4 d'4",
    ),
    (
        r"\clef treble \key c \major e'' \fermata e''4 | f''8 e''8 d''4 e''8 e''4 | d''4",
        "4/4",
        r"\clef treble \key c \major e''4 \fermata e''2. | f''8 e''8 d''4 e''8 e''4. | d''4",
    ),
    (
        r"\clef bass \key f \major e'16 d''16 d'8 \bar d'4 d'8 d''8 b8 | b8 d'4 d'8 g8 e'16",
        "4/4",
        r"\clef bass \key f \major e'16 d''16 d'2.. | d'4 d'8 d''8 b2 | b8 d'4 d'8 g8 e'16",
    ),
    (  # a pickup read without its length: its bar's events give it
        r"\clef treble \key d \major \time 2/2 \partial e''8 ( d''8 ) | cis''4 a'8 b'8 cis''2",
        None,
        r"\clef treble \key d \major \time 2/2 \partial 4 e''8 ( d''8 ) | cis''4 a'8 b'8 cis''2",
    ),
    (  # ... unless a tuplet makes it more than a sum: the pickup dropped, the bar filled
        r"\clef treble \key d \major \time 2/4 \partial \tuplet 3/2 { e''8 d''8 c''8 } | b'2",
        None,
        r"\clef treble \key d \major \time 2/4 \tuplet 3/2 { e''8 d''8 c''8 } r4 | b'2",
    ),
    (  # a bar line the model missed, an event that overflows, a slur left open
        r"\clef treble \key g \major \time 2/4 g'4 a'4 b'4 ( c''4 d''2 e''4",
        None,
        r"\clef treble \key g \major \time 2/4 g'4 a'4 | b'4 ( c''4 | d''2 | e''4 )",
    ),
]


@pytest.mark.parametrize(("greedy", "time", "fixed"), REPAIRS)
def test_repair_keeps_the_reading_and_makes_it_valid(greedy, time, fixed):
    assert not canonical.is_canonical(greedy, time)
    assert repair(greedy, time) == fixed
    canonical.validate(fixed, time)


def _peaked(vocab: Vocab, text: str) -> np.ndarray:
    """CTC logits (1, T, V) that read `text`: each piece peaked on its own frame."""
    ids = _tokens(vocab, text)
    logits = np.zeros((1, 2 * len(ids) + 1, len(vocab.pieces)), dtype=np.float32)
    logits[0, :, vocab.blank] = 5.0
    for k, i in enumerate(ids):
        logits[0, 2 * k + 1, i] = 12.0
    return logits


def test_the_likelier_of_search_and_repair_is_read(vocab, monkeypatch):
    # a bar read short (d8 for d4): the search and the repaired greedy reading both validate;
    # the one the frames make likelier is returned
    greedy = r"\clef bass \key f \major c4 d8 | e4 f4 | g4 a4 | b4 c'4"
    logits = _peaked(vocab, greedy)
    logp = logits[0] - np.logaddexp.reduce(logits[0], axis=-1, keepdims=True)
    stats = Counter()
    (row,) = ctc_decode(logits, vocab, vocab.blank, ["2/4"], 200, stats=stats)
    canonical.validate(vocab.text(row), "2/4")
    assert vocab.text(row).count("|") == 3  # no bar lost
    fixed = vocab.ids(repair(greedy, "2/4"))
    assert constrained.ctc_logp(logp, row, vocab.blank) >= constrained.ctc_logp(
        logp, fixed, vocab.blank
    )
    # where the search ends at the short bar, as it does for a third of the default model's
    # test systems, the repaired reading (one duration changed) is the one returned
    cut = _tokens(vocab, r"\clef bass \key f \major c4 d8")
    monkeypatch.setattr(search, "_beam", lambda *args: cut)
    stats = Counter()
    (row,) = ctc_decode(logits, vocab, vocab.blank, ["2/4"], 200, stats=stats)
    assert vocab.text(row) == r"\clef bass \key f \major c4 d4 | e4 f4 | g4 a4 | b4 c'4"
    assert stats["repaired"] == 1


def test_a_slur_whose_end_was_missed_is_closed_not_the_system_emptied(vocab, monkeypatch):
    # a scan's threshold lost the slur's `)`: no prefix after its `(` is complete. A beam of
    # one keeps only the prefix that took the `(` (a real model's beam fills so), and neither
    # the repair nor a meter refit is offered here: the search's cut-back alone decides
    read = r"\clef treble \key g \major \time 2/4 d''8 ( e''8 fis''8 g''8 | a''4 b''4 | c'''2"
    logits = _peaked(vocab, read)
    monkeypatch.setattr(search, "repair", lambda text, time: None)
    monkeypatch.setattr(search, "meter_refits", lambda text, time: iter(()))
    stats = Counter()
    (row,) = ctc_decode(logits, vocab, vocab.blank, [None], 200, search.CtcSearch(beam=1), stats)
    # every note kept, the slur closed where the reading ends (before: cut back to `d''8`)
    assert vocab.text(row) == read + " )"
    assert stats["cut_back"] == 1 and stats["empty"] == 0


# A reel in 2/2 (Verovio prints it in digits) whose meter the model read as 3/8: eight eighths
# a bar, which 3/8 holds to three
REEL = (
    r"\clef treble \key d \major \time 3/8 fis'8 a'8 d''8 a'8 fis'8 a'8 d''8 a'8 "
    r"| g'8 b'8 d''8 b'8 g'8 b'8 d''8 b'8"
)
REEL_NEXT = r"\clef treble \key d \major a'8 cis''8 e''8 cis''8 a'8 cis''8 e''8 cis''8 | d''1"


def test_meter_refits_offer_the_meters_the_bars_fill():
    assert not canonical.is_canonical(REEL)
    refits = list(meter_refits(REEL, None))
    meters = {canonical.header_time(t) for t in refits}
    assert {"2/2", "4/4"} <= meters and "3/8" not in meters
    for text in refits:
        canonical.validate(text)
    whole = [t for t in refits if canonical.header_time(t) in ("2/2", "4/4")]
    assert all(t.split()[7:] == REEL.split()[7:] for t in whole)  # every note kept as read
    assert list(meter_refits(REEL_NEXT, "3/8")) == []  # no meter printed: nothing to refit
    # `\time` read before no meter (a repeat sign taken for one): the header without it, its
    # bars read in the time in force
    garbled = REEL_NEXT.replace(r"\major", r"\major \time \bar")
    assert REEL_NEXT in meter_refits(garbled, "2/2")


def _emitted(vocab: Vocab, ids: list[int], frames: int) -> np.ndarray:
    """CTC logits (T, V) of a model that emits `ids`: each on its own frame, blanks between."""
    logits = np.zeros((frames, len(vocab.pieces)), dtype=np.float32)
    logits[:, vocab.blank] = 5.0
    for k, i in enumerate(ids):
        logits[2 * k + 1, i] = 12.0
    return logits


def test_a_misread_meter_gives_way_to_the_bars_and_carries_to_the_next_row(vocab):
    # row 1 prints the misread 3/8; row 2 prints none and is read in what row 1 leaves in force.
    # The model emits the tokenizer's own pieces (as one trained on them does)
    first_ids, next_ids = vocab.ids(REEL), vocab.ids(REEL_NEXT)
    frames = 2 * max(len(first_ids), len(next_ids)) + 1
    logits = np.stack([_emitted(vocab, first_ids, frames), _emitted(vocab, next_ids, frames)])
    # the frames that read 3/8 hold 2/2 far behind, below what the beam search tries (CtcSearch
    # min_logp), so the search alone keeps 3/8 and cuts or merges the bars
    meter = vocab.ids(REEL.split(" \\time")[0] + " \\time")
    assert first_ids[: len(meter)] == meter
    three, two = first_ids[len(meter) : len(meter) + 2], vocab.ids(" 2/2")
    assert [vocab.pieces[i] for i in three] == [" 3/", "8"] and len(two) == 3
    at = 2 * len(meter) + 1  # the first frame of 3/8
    for frame, piece, logit in zip((at, at + 1, at + 2), two, (6.0, 4.0, 6.0), strict=True):
        logits[0, frame, piece] = logit
    stats = Counter()
    first, second = ctc_decode(logits, vocab, vocab.blank, Carry(None), 400, stats=stats)
    assert vocab.text(first) == REEL.replace("3/8", "2/2")  # not one note cut
    assert stats["meter_refit"] == 1
    assert vocab.text(second) == REEL_NEXT  # every bar whole in the refit meter
    # without the refits the search keeps the misread meter and loses the bars
    stats = Counter()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search, "meter_refits", lambda text, time: iter(()))
        alone = vocab.text(ctc_decode(logits[:1], vocab, vocab.blank, Carry(None), 400)[0])
    assert canonical.header_time(alone) != "2/2" and alone.count("|") != 1


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
    from sonfolio.score.model.model import load_trained
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
    # 96 tokens: an untrained decoder wanders before it reaches a complete point (this one
    # opens two rows with a grace group; the longer becomes complete at its 70th token)
    texts = v.generate(pixels, 96, times=times, constrained=True)
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


def test_ctc_logp_is_torchs_ctc_loss_negated():
    # the search ranks readings by it without torch (the inference path imports none)
    import torch

    rng = np.random.default_rng(5)
    for _ in range(60):
        frames, width = int(rng.integers(1, 30)), 6
        logp = torch.randn(frames, width, generator=torch.Generator().manual_seed(frames))
        logp = logp.log_softmax(-1).numpy()
        ids = [int(i) for i in rng.integers(1, width, size=int(rng.integers(1, 12)))]
        loss = torch.nn.functional.ctc_loss(
            torch.from_numpy(logp)[:, None, :],
            torch.tensor([ids]),
            torch.tensor([frames]),
            torch.tensor([len(ids)]),
            blank=0,
            reduction="sum",
        )
        ours = constrained.ctc_logp(logp, ids, 0)
        assert ours == pytest.approx(-float(loss), abs=1e-3) or ours == -float(loss) == -np.inf
    assert constrained.ctc_logp(logp, [], 0) == pytest.approx(float(logp[:, 0].sum()))
