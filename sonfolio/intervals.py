"""How far an error rate could move on other samples of the same kind: bootstrap intervals
over groups (pieces, speakers) resampled whole, as the pages of one piece or the clips of one
voice err together (scipy's `stats.bootstrap`, percentile intervals: with a dozen groups BCa's
acceleration estimate is itself noisy). Imports neither torch nor transformers.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

INTERVAL_LEVEL = 0.95  # of every interval below (the `_ci95` keys)
RESAMPLES = 2000


def _ratio(errors: np.ndarray, totals: np.ndarray, axis: int = -1) -> np.ndarray:
    return errors.sum(axis=axis) / totals.sum(axis=axis)


def rate_interval(errors: list[float], totals: list[float], seed: int = 0) -> list[float] | None:
    """The 95 % percentile bootstrap interval of sum(errors) / sum(totals), each position a
    group (a piece, a speaker) resampled whole; None with fewer than 2 groups or no total."""
    if len(errors) < 2 or sum(totals) <= 0:
        return None
    e, t = np.asarray(errors, float), np.asarray(totals, float)
    if len(set(e / np.maximum(t, 1e-12))) == 1:  # every group errs alike: nothing to resample
        return [round(float(_ratio(e, t)), 4)] * 2
    ci = stats.bootstrap(
        (e, t), _ratio, paired=True, vectorized=True, n_resamples=RESAMPLES,
        confidence_level=INTERVAL_LEVEL, method="percentile", rng=np.random.default_rng(seed),
    ).confidence_interval  # fmt: skip
    return [round(float(ci.low), 4), round(float(ci.high), 4)]


def difference_interval(
    errors_a: list[float], errors_b: list[float], totals: list[float], seed: int = 0
) -> dict[str, float | list[float] | None]:
    """B's rate minus A's on the same groups (a paired comparison: both read the same pages or
    clips), with its 95 % percentile bootstrap interval over groups: an interval that holds 0
    does not tell the two apart on these samples; no interval under 2 groups."""
    a, b, t = (np.asarray(x, float) for x in (errors_a, errors_b, totals))
    if t.sum() <= 0:
        return {"difference": None, "difference_ci95": None}
    diff = float(_ratio(b, t) - _ratio(a, t))
    if len(t) < 2:  # one group: nothing to resample
        return {"difference": round(diff, 4), "difference_ci95": None}

    def statistic(a: np.ndarray, b: np.ndarray, t: np.ndarray, axis: int = -1) -> np.ndarray:
        return _ratio(b, t, axis) - _ratio(a, t, axis)

    if len(set((b - a) / np.maximum(t, 1e-12))) == 1:
        interval = [round(diff, 4)] * 2
    else:
        ci = stats.bootstrap(
            (a, b, t), statistic, paired=True, vectorized=True, n_resamples=RESAMPLES,
            confidence_level=INTERVAL_LEVEL, method="percentile",
            rng=np.random.default_rng(seed),
        ).confidence_interval  # fmt: skip
        interval = [round(float(ci.low), 4), round(float(ci.high), 4)]
    return {"difference": round(diff, 4), "difference_ci95": interval}


def grouped(errors: list[float], totals: list[float], keys: list[str]) -> tuple[list, list]:
    """(errors summed, totals summed) per key, in first-seen order: the groups to resample."""
    sums: dict[str, list[float]] = {}
    for e, t, k in zip(errors, totals, keys, strict=True):
        pair = sums.setdefault(k, [0, 0])
        pair[0] += e
        pair[1] += t
    return [e for e, _ in sums.values()], [t for _, t in sums.values()]
