"""Word and character error rates as `evaluate` metrics: thin wrappers around jiwer.

The scripts wer/wer.py and cer/cer.py hand these classes to `evaluate.load("<their folder>")`
(sonfolio.speech.eval.metrics.load), which loads offline where the hub's "wer" and "cer" need the
network.

Corpus rate: (substitutions + deletions + insertions) / reference words or characters (spaces
included, jiwer.process_characters), over all pairs. Texts are compared as given (normalise
them first). An empty hypothesis costs all its reference's units (deletions); an empty
reference adds its hypothesis units as insertions and no reference units; when every reference
is empty the rate is undefined and compute raises ValueError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import datasets
import evaluate
import jiwer

_KWARGS = """
Args:
    predictions: list of hypothesis texts.
    references: list of reference texts, as many.
Returns:
    {key}: corpus {rate} (float, 0 = perfect, can exceed 1),
    substitutions, deletions, insertions, hits: counts over the corpus,
    reference_{unit}: the denominator.
"""


class ErrorRate(evaluate.Metric):
    """An error rate over units aligned by `_process`; each subclass names its own. (The
    names are private: evaluate.Metric's public ones, `name` and `description` among them,
    are properties over its MetricInfo.)"""

    _key: str  # the result's key: "wer", "cer"
    _rate: str  # "word error rate"
    _unit: str  # "words", "chars": the denominator's key is reference_<unit>
    _about: str  # the MetricInfo's description
    _process: Callable[[list[str], list[str]], Any]  # jiwer's alignment

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self._about,
            citation="",
            inputs_description=_KWARGS.format(key=self._key, rate=self._rate, unit=self._unit),
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Value("string"),
                }
            ),
        )

    def _compute(self, predictions: list[str], references: list[str]) -> dict[str, Any]:
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
        if not any(r.strip() for r in references):
            raise ValueError(f"every reference is empty: the {self._rate} is undefined")
        out = self._process(list(references), list(predictions))
        total = out.hits + out.substitutions + out.deletions
        return {
            self._key: (out.substitutions + out.deletions + out.insertions) / total,
            "substitutions": out.substitutions,
            "deletions": out.deletions,
            "insertions": out.insertions,
            "hits": out.hits,
            f"reference_{self._unit}": total,
        }


class Wer(ErrorRate):
    """Word error rate over whitespace-separated words."""

    _key, _rate, _unit = "wer", "word error rate", "words"
    _about = "Word error rate over whitespace-separated words (jiwer.process_words)."
    _process = staticmethod(jiwer.process_words)


class Cer(ErrorRate):
    """Character error rate, spaces included."""

    _key, _rate, _unit = "cer", "character error rate", "chars"
    _about = "Character error rate (jiwer.process_characters)."
    _process = staticmethod(jiwer.process_characters)
