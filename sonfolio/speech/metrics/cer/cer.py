"""Character error rate as an `evaluate` metric that loads offline: a thin wrapper around jiwer.

`evaluate.load("cer")` fetches the hub's script, which fails with no network; this local module
loads with `evaluate.load("<this folder>")` (sonfolio.speech.metrics.load). One import per line:
evaluate scans this file's imports before it copies it into its module cache.

Corpus rate: (substitutions + deletions + insertions) / reference characters, spaces included
(jiwer.process_characters), over all pairs. Texts are compared as given (normalise them
first). An empty hypothesis costs all its reference's characters; an empty reference adds its
hypothesis characters as insertions; when every reference is empty compute raises ValueError.
"""

import datasets
import evaluate
import jiwer

_DESCRIPTION = "Character error rate (jiwer.process_characters)."
_KWARGS = """
Args:
    predictions: list of hypothesis texts.
    references: list of reference texts, as many.
Returns:
    cer: corpus character error rate (float, 0 = perfect, can exceed 1),
    substitutions, deletions, insertions, hits: counts over the corpus,
    reference_chars: the denominator.
"""


class Cer(evaluate.Metric):
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
        if not any(r.strip() for r in references):
            raise ValueError("every reference is empty: the character error rate is undefined")
        out = jiwer.process_characters(list(references), list(predictions))
        chars = out.hits + out.substitutions + out.deletions
        return {
            "cer": (out.substitutions + out.deletions + out.insertions) / chars,
            "substitutions": out.substitutions,
            "deletions": out.deletions,
            "insertions": out.insertions,
            "hits": out.hits,
            "reference_chars": chars,
        }
