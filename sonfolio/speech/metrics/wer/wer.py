"""Word error rate as an `evaluate` metric that loads offline: a thin wrapper around jiwer.

`evaluate.load("wer")` fetches the hub's script, which fails with no network; this local module
loads with `evaluate.load("<this folder>")` (sonfolio.speech.metrics.load). One import per line:
evaluate scans this file's imports before it copies it into its module cache.

Corpus rate: (substitutions + deletions + insertions) / reference words, over all pairs. Texts
are compared as given (normalise them first). An empty hypothesis costs all its reference's
words (deletions); an empty reference adds its hypothesis words as insertions and no reference
words; when every reference is empty the rate is undefined and compute raises ValueError.
"""

import datasets
import evaluate
import jiwer

_DESCRIPTION = "Word error rate over whitespace-separated words (jiwer.process_words)."
_KWARGS = """
Args:
    predictions: list of hypothesis texts.
    references: list of reference texts, as many.
Returns:
    wer: corpus word error rate (float, 0 = perfect, can exceed 1),
    substitutions, deletions, insertions, hits: counts over the corpus,
    reference_words: the denominator.
"""


class Wer(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Value("string"),
                }
            ),
        )

    def _compute(self, predictions, references):
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
        if not any(r.split() for r in references):
            raise ValueError("every reference is empty: the word error rate is undefined")
        out = jiwer.process_words(list(references), list(predictions))
        words = out.hits + out.substitutions + out.deletions
        return {
            "wer": (out.substitutions + out.deletions + out.insertions) / words,
            "substitutions": out.substitutions,
            "deletions": out.deletions,
            "insertions": out.insertions,
            "hits": out.hits,
            "reference_words": words,
        }
