"""Word error rate as an `evaluate` metric that loads offline: metrics.rates.Wer.

`evaluate.load("wer")` fetches the hub's script, which fails with no network; this local module
loads with `evaluate.load("<this folder>")` (sonfolio.speech.eval.metrics.load): evaluate copies it
into its module cache, imports it and takes the metric class it finds in it.
"""

from sonfolio.speech.eval.metrics.rates import Wer

__all__ = ["Wer"]
