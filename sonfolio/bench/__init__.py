"""The bench: every variant of a track measured on the same inputs, each in a worker process.

What it measures: size, peak RSS, latency, throughput and the greedy outputs (scored by the
stage, tasks/bench.py).

case: what a worker measures; worker: one variant in a fresh process (its peak RSS its own),
timed on a forced decode length; the runtimes it runs: torch_runtime (HF generate), ort_runtime
(optimum's ORTModel), loop_runtime (our ORT greedy loop, sonfolio.infer.ortloop), peer
(CTranslate2, a track's peer engine); track: the rounds, interleaved, pooled into p50 / p95,
compared with torch FP32 and gated.

A model read by its CTC head (config `ctc_decoding`, sonfolio.train.ctc) has no decoder steps:
every runtime runs its encoder with the head and collapses the best labels, so end-to-end is
the encoder's time plus the head's, and "decoder ms per token" is what little that adds
spread over `decode_tokens`; `decoding` says which a variant used.
"""
