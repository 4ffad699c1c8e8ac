"""Reading a CTC head under the canonical grammar (`ctc_decode`): a CTC prefix beam search
(Graves 2012, Hannun et al. 2014) that extends a prefix only with a piece the grammar allows,
written here because no installed library searches under a grammar over a byte-level BPE
(pyctcdecode and torchaudio's decoder take word lexicons and n-gram LMs). Beside it the greedy
reading is repaired token by token (sonfolio.score.decode.repair), and the reading the CTC
head makes likelier (`ctc_logp`) is returned: the search alone drops whole bars after a
misread duration (counted as `repaired` where the repair wins); and the greedy reading under
each other printed meter (`meter_refit` where one wins: a misread meter otherwise holds
every bar, and every later system of a page, to the wrong length). The searches of a batch may
run in a pool of processes, one pool per vocabulary.

When nothing complete is found (a model stuck in a dead end, or out of tokens), the best
prefix is cut back to its last complete point, or to the last point an open slur's `)` would
complete (counted as `cut_back`); when even that is empty, the decoder returns no tokens
(counted as `empty`): the empty text, which `validate` rejects, so callers see it as a failed
reading; nothing is invented.
"""

from __future__ import annotations

import atexit
import functools
import math
import multiprocessing
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sonfolio import parallel
from sonfolio.score.common import canonical as cn
from sonfolio.score.decode.repair import meter_refits, repair
from sonfolio.score.decode.state import State
from sonfolio.score.decode.vocab import Carry, Vocab, next_time

_NEG = -math.inf


def _logadd(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    if b == _NEG:
        return a
    return a + math.log1p(math.exp(b - a))


class _Node:
    """A prefix in the beam search's trie: its state and its children are made once."""

    __slots__ = ("parent", "token", "state", "length", "children")

    def __init__(self, parent: _Node | None, token: int, state: State, length: int) -> None:
        self.parent, self.token, self.state, self.length = parent, token, state, length
        self.children: dict[int, _Node | None] = {}

    def child(self, vocab: Vocab, token: int, table: dict | None = None) -> _Node | None:
        if token in self.children:
            return self.children[token]
        state = self.state.step(vocab, token, table)
        node = None if state is None else _Node(self, token, state, self.length + 1)
        self.children[token] = node
        return node

    def ids(self) -> list[int]:
        out, node = [], self
        while node.parent is not None:
            out.append(node.token)
            node = node.parent
        return out[::-1]


@dataclass(frozen=True)
class CtcSearch:
    """The constrained CTC search's knobs (defaults: measured in benchmarks/constrained.py)."""

    # measured on 200 test systems of the format-2 default model (SER; greedy: 0.393, invalid
    # 94 %): beam 6 / top 8: 0.473, 41 ms a system; 12 / 12: 0.440, 92 ms; 16 / 16: 0.429,
    # 128 ms; 32 / 16: 0.412, 258 ms. 16 / 16 keeps the main command within its hour.
    beam: int = 16  # prefixes kept per frame
    top_k: int = 16  # a frame's best tokens tried on each prefix
    # tokens less likely than e^-5 at a frame are not tried: on the 881 test and held-out
    # systems eval@score reads (the 2026-11-29 default, int8_ptq), SER test / held-out at -8:
    # 0.2879 / 0.1942; -6: 0.2871 / 0.1922; -5: 0.2885 / 0.1906, the search 1.4x faster than -8
    min_logp: float = -5.0
    # a frame that emits (blank below 1/2) where a prefix may take none of the tried tokens
    # extends it by the best token the grammar allows among this many (a v1 model's `\\minor`
    # becomes `\\major` so); the whole vocabulary by default
    rescue: int | None = None


@dataclass(frozen=True)
class _Rules:
    """How one row is searched besides its frames and the vocabulary (small: a search pool's
    job pickles it; the vocabulary waits in the worker)."""

    blank: int
    time: str | None  # the time in force before the row
    limit: int | None  # the most tokens a reading may have
    search: CtcSearch


def ctc_decode(
    logits: np.ndarray,
    vocab: Vocab,
    blank: int,
    times: Sequence[str | None] | Carry | None,
    limit: int | None = None,
    search: CtcSearch = CtcSearch(),
    stats: Counter | None = None,
    workers: int = 1,
) -> list[list[int]]:
    """Token ids per row whose text validates, from CTC logits (B, T, V).

    Greedy first (best label per frame, repeats merged, blanks dropped): when its text
    validates it is returned as is (`stats["greedy_valid"]`); otherwise the constrained prefix
    beam search (`stats["searched"]`). `times`: per row the time in force (or a Carry).
    `workers` > 1: the searches of rows with a known time run in that many processes (a
    `Carry`'s rows wait on the row before, so they run here, in order).
    """
    stats = Counter() if stats is None else stats
    logits = np.asarray(logits, dtype=np.float32)
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)  # (B, T, V)
    best = logp.argmax(-1)  # (B, T)
    if not isinstance(times, Carry):
        return _decode_rows(logp, best, vocab, blank, times, limit, search, stats, workers)
    rows: list[list[int]] = []
    time = times.start
    for b in range(len(logp)):
        ids = _greedy(best[b], blank, limit)
        if cn.is_canonical(vocab.text(ids), time):
            stats["greedy_valid"] += 1
        else:
            stats["searched"] += 1
            ids = _search(logp[b], ids, vocab, _Rules(blank, time, limit, search), stats)
        rows.append(ids)
        time = next_time(vocab.text(ids), time)
    return rows


def _greedy(best: np.ndarray, blank: int, limit: int | None) -> list[int]:
    """One row's greedy reading: its best labels, repeats merged, blanks dropped."""
    return best[(best != blank) & np.r_[True, best[1:] != best[:-1]]][:limit].tolist()


def _decode_rows(
    logp: np.ndarray,
    best: np.ndarray,
    vocab: Vocab,
    blank: int,
    times: Sequence[str | None] | None,
    limit: int | None,
    search: CtcSearch,
    stats: Counter,
    workers: int,
) -> list[list[int]]:
    """ctc_decode of rows each in its own known time: the searches are independent, so with
    `workers` > 1 (and more than one to do) they run in the search pool."""
    rows: list[list[int]] = []
    jobs = []
    for b in range(len(logp)):
        time = None if times is None else times[b]
        ids = _greedy(best[b], blank, limit)
        if cn.is_canonical(vocab.text(ids), time):
            stats["greedy_valid"] += 1
        else:
            stats["searched"] += 1
            jobs.append((b, (logp[b], ids, _Rules(blank, time, limit, search))))
        rows.append(ids)
    if workers > 1 and len(jobs) > 1:
        found = _search_pool(vocab, workers).starmap(_search_job, [args for _, args in jobs])
    else:
        found = []
        for _, (row, greedy, rules) in jobs:
            counts: Counter = Counter()
            found.append((_search(row, greedy, vocab, rules, counts), counts))
    for (b, _), (ids, counts) in zip(jobs, found, strict=True):
        rows[b] = ids
        stats.update(counts)
    return rows


# Worker processes for the searches, one pool per vocabulary and size, kept for the process's
# life (a variant after another with the same tokenizer reuses it) and closed at exit. Written
# with multiprocessing.Pool, not sonfolio.parallel.pool_map: a search is a short pure-Python
# task with no time limit to enforce, called once per batch, and a pool started per batch would
# cost more than the searches it shares out.
_POOLS: dict[tuple[int, int], Any] = {}
_WORKER_VOCAB: Vocab | None = None


def _search_pool(vocab: Vocab, workers: int) -> Any:
    key = (vocab.key, workers)
    pool = _POOLS.get(key)
    if pool is None:
        if not _POOLS:
            atexit.register(close_search_pools)
        # fork: the workers inherit the imported modules (as sonfolio.parallel's); they run
        # only this module's pure-Python search, never the parent's inference threads' code
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(workers, initializer=_search_worker, initargs=(vocab,))
        _POOLS[key] = pool
    return pool


def close_search_pools() -> None:
    """Stop the search processes (at exit; tests call it to start afresh)."""
    while _POOLS:
        _, pool = _POOLS.popitem()
        pool.terminate()
        pool.join()


def _search_worker(vocab: Vocab) -> None:
    global _WORKER_VOCAB
    parallel.worker_signals()
    _WORKER_VOCAB = vocab


def _search_job(logp: np.ndarray, greedy: list[int], rules: _Rules) -> tuple[list[int], Counter]:
    if _WORKER_VOCAB is None:
        raise RuntimeError("a search job ran outside a search pool's worker")
    stats: Counter = Counter()
    return _search(logp, greedy, _WORKER_VOCAB, rules, stats), stats


def _search(
    logp: np.ndarray, greedy: list[int], vocab: Vocab, rules: _Rules, stats: Counter
) -> list[int]:
    """The likeliest (under the CTC head) of the valid readings of a row whose greedy reading
    does not validate: the constrained beam search's, the greedy reading repaired (`repair`),
    and the greedy reading under each other printed meter (`meter_refits`). The search alone
    loses whole bars: once a misread duration leaves a bar short, the grammar refuses the `|`
    the model writes, and no later frame offers another `|`, so the best prefix it keeps ends
    there (a third of the test systems lost 40 % of their symbols so)."""
    blank, limit = rules.blank, rules.limit
    found = _beam(logp, vocab, rules, stats)
    text = vocab.text(greedy)
    fixed = repair(text, rules.time)
    others = [] if fixed is None else [("repaired", fixed)]
    others += [("meter_refit", alt) for alt in meter_refits(text, rules.time)]
    if not others:  # nothing to weigh the search against: its reading is not scored
        return found
    best, best_logp, won = found, ctc_logp(logp, found, blank) if found else _NEG, None
    for kind, alt in others:
        ids = vocab.ids(alt)
        if limit is not None and len(ids) > limit:
            continue
        score = ctc_logp(logp, ids, blank)
        if not best or score > best_logp:
            best, best_logp, won = ids, score, kind
    if won is not None:
        stats[won] += 1
    return best


def ctc_logp(logp: np.ndarray, ids: Sequence[int], blank: int) -> float:
    """log P(ids | frames) under CTC (every alignment summed), from (T, V) log-probabilities;
    -inf where the frames cannot hold the ids.

    The CTC forward recursion (Graves et al. 2006) in numpy, float64: the value torch's
    `ctc_loss(reduction="sum")` negates (tests/score/test_search.py compares them). Our own
    because the inference path imports no torch (~300 MB resident for one number a system)."""
    frames = np.asarray(logp, dtype=np.float64)
    if not ids:
        return float(frames[:, blank].sum())
    labels = np.full(2 * len(ids) + 1, blank, dtype=np.intp)  # blank, id, blank, id, ..., blank
    labels[1::2] = ids
    # a label may follow the one two back (skipping a blank) unless both are the same id
    skip = np.zeros(labels.size, dtype=bool)
    skip[3::2] = labels[3::2] != labels[1:-2:2]
    alpha = np.full(labels.size, -np.inf)
    alpha[:2] = frames[0, labels[:2]]
    for frame in frames[1:]:
        prev = alpha
        step = np.logaddexp(prev, np.concatenate(([-np.inf], prev[:-1])))
        step[skip] = np.logaddexp(step[skip], prev[np.flatnonzero(skip) - 2])
        alpha = step + frame[labels]
    return float(np.logaddexp(alpha[-1], alpha[-2]))


def _beam(logp: np.ndarray, vocab: Vocab, rules: _Rules, stats: Counter) -> list[int]:
    """The constrained prefix beam search over one row's (T, V) log-probabilities."""
    blank, limit, search = rules.blank, rules.limit, rules.search
    root = _Node(None, -1, State.start(rules.time), 0)
    beam: dict[_Node, tuple[float, float]] = {root: (0.0, _NEG)}  # node -> (blank, non-blank)
    table: dict = {}  # the row's grammar states, one for each identity (State.step)
    k = min(search.rescue or logp.shape[1], logp.shape[1])
    for frame in logp:
        top = np.argpartition(-frame, search.top_k)[: search.top_k]
        top = top[np.argsort(-frame[top])].tolist()  # the frame's best, best first
        tried = [c for c in top if c != blank and frame[c] >= search.min_logp]
        emits = frame[blank] < math.log(0.5)  # the model writes a token here
        order = None
        nxt: dict[_Node, list[float]] = {}
        add = functools.partial(_add, nxt)

        for node, (pb, pnb) in beam.items():
            total = _logadd(pb, pnb)
            add(node, total + float(frame[blank]), _NEG)
            extended = False
            for c in tried:
                y = float(frame[c])
                if c == node.token:  # a repeat merges unless a blank came between
                    add(node, _NEG, pnb + y)
                    base = pb
                else:
                    base = total
                if limit is not None and node.length >= limit:
                    continue
                child = node.child(vocab, c, table)
                if child is not None:
                    add(child, _NEG, base + y)
                    extended = True
            if emits and not extended and (limit is None or node.length < limit):
                if order is None:  # sorted once a frame, and only where needed
                    order = np.argsort(-frame)[:k].tolist()
                for c in order[search.top_k :]:  # the best token the grammar allows here
                    if c != blank and c != node.token and (child := node.child(vocab, c, table)):
                        add(child, _NEG, total + float(frame[c]))
                        break
        ranked = sorted(nxt.items(), key=lambda kv: -_logadd(*kv[1]))
        beam = {n: (v[0], v[1]) for n, v in ranked[: search.beam]}
    ids = _final(beam, vocab, rules, stats)
    if not ids:  # nothing complete in the beam: follow the frames one by one instead
        ids = _frame_greedy(logp, vocab, rules, root)
        stats["frame_greedy" if ids else "empty"] += 1
    return ids


def _frame_greedy(logp: np.ndarray, vocab: Vocab, rules: _Rules, root: _Node) -> list[int]:
    """The last resort when the beam holds nothing complete (its prefixes all stuck on tokens
    the grammar refuses): every frame that emits a new token gives the best token the grammar
    allows there, so the prefix never stalls; cut back to its last complete point."""
    blank, limit = rules.blank, rules.limit
    node, prev = root, blank
    k = min(rules.search.rescue or logp.shape[1], logp.shape[1])
    for frame in logp:
        best = int(frame.argmax())
        if best in (blank, prev):
            prev = best
            continue
        prev = best
        if limit is not None and node.length >= limit:
            break
        for c in np.argsort(-frame)[:k].tolist():
            if c != blank and (child := node.child(vocab, c)) is not None:
                node = child
                break
    return _cut_back(node, vocab, rules) or []


def _cut_back(node: _Node | None, vocab: Vocab, rules: _Rules) -> list[int] | None:
    """`node`'s prefix cut back to its last complete point, where a point whose text is
    complete once its open slur is closed counts (as `repair` closes one): a slur whose `)`
    the model missed (faint or lost under a scan's threshold) would otherwise leave nothing
    complete after its `(`, and the whole system empty. None: no such point."""
    while node is not None:
        if node.state.complete:
            return node.ids()
        text = vocab.text(node.ids())
        if "(" in text:  # only a slur left open is closed here
            closed = text + " )"
            if cn.is_canonical(closed, rules.time):
                ids = vocab.ids(closed)
                if rules.limit is None or len(ids) <= rules.limit:
                    return ids
        node = node.parent
    return None


def _add(beam: dict[_Node, list[float]], node: _Node, pb: float, pnb: float) -> None:
    """Sum (blank, non-blank) log-probabilities into a prefix of the next frame's beam."""
    e = beam.get(node)
    if e is None:
        beam[node] = [pb, pnb]
    else:
        e[0], e[1] = _logadd(e[0], pb), _logadd(e[1], pnb)


def _final(
    beam: dict[_Node, tuple[float, float]], vocab: Vocab, rules: _Rules, stats: Counter
) -> list[int]:
    """The best complete prefix; else the best one cut back to its last complete point."""
    ranked = sorted(beam, key=lambda n: -_logadd(*beam[n]))
    for node in ranked:
        if node.state.complete:
            return node.ids()
    ids = _cut_back(ranked[0], vocab, rules)
    if ids is None:
        return []  # the caller tries the frames one by one, and counts
    stats["cut_back"] += 1
    return ids
