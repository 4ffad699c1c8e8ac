"""The params sections `bench` and `<track>_bench`, and what the bench stage reads."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sonfolio.config.base import Positive, Strict
from sonfolio.config.export import Export
from sonfolio.config.sections import Sections
from sonfolio.config.train import ScoreTrain, SpeechTrain


class Bench(Strict):
    """How the bench (bench@score, ...) measures every variant (same inputs, one run)."""

    samples: Positive  # test-split samples, the first N of the manifest
    threads: Positive  # intra-op threads of every runtime (torch, ORT, CTranslate2)
    warmup: Annotated[int, Field(ge=0)]  # untimed samples per process before timing
    repeats: Positive  # interleaved rounds (a fresh process per variant per round)
    batch_size: Annotated[int, Field(ge=2)]  # throughput measured at 1 and at this
    decode_tokens: Positive  # forced decode length for latency (end of text suppressed)
    io_binding: bool  # ORT: bind inputs/outputs (optimum's use_io_binding)
    lean_loop: bool  # also run each ONNX variant with sonfolio.bench's plain greedy loop
    loop_decoder_threads: Positive  # that loop's decoder session: intra-op threads
    spin_wait: bool  # idle intra-op threads spin (ORT allow_spinning; OMP_WAIT_POLICY)
    fail_on_gate: bool  # a variant past its quality gate fails the stage (else: marked)


class ScoreBench(Strict):
    """score_bench: the quality gate of the score variants."""

    max_ter_increase: Annotated[float, Field(ge=0.0)]  # vs torch FP32, absolute (0.01 = 1 point)
    optimum_rows: bool  # also time each ONNX variant through optimum's generate (ort_*)


class SpeechBench(Strict):
    """speech_bench: the quality gate of the speech variants, and the peer engine."""

    max_wer_increase: Annotated[float, Field(ge=0.0)]  # vs torch FP32, absolute
    optimum_rows: bool  # also time each ONNX variant through optimum's generate (ort_*)
    ctranslate2: bool  # also measure the CTranslate2 int8 peer (faster-whisper's engine)
    # faster-whisper on our model converted to CTranslate2 int8 (needs Whisper's tokenizer)
    faster_whisper_finetuned: bool
    # the untouched base as a CTranslate2 folder, through faster-whisper with its own window
    # (its zero-shot quality); null: not measured
    faster_whisper_base: str | None


class BenchParams(Sections):
    """What stage bench reads: `bench`, `<track>_bench`, the variants' list (export.quantize)
    and the quality decode's length (<track>_train.decode_max_tokens)."""

    score_train: ScoreTrain
    speech_train: SpeechTrain
    export: Export
    bench: Bench
    score_bench: ScoreBench
    speech_bench: SpeechBench
