"""The params sections `<track>_eval`, and what the eval stage reads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sonfolio.config.base import Positive, Strict
from sonfolio.config.data import SCAN_KINDS, ScoreData
from sonfolio.config.infer import Infer
from sonfolio.config.sections import Sections

_KIND = "|".join(SCAN_KINDS)
# lilypond | verovio:<font>, then nothing, +scan (every kind) or +scan:<kind>[,<kind>...]
ENGRAVING_PATTERN = (
    r"(lilypond|verovio:(Leipzig|Bravura|Gootville|Leland|Petaluma))"
    rf"(\+scan(?::((?:{_KIND})(?:,(?:{_KIND}))*))?)?"
)


class ScoreEvalPages(Strict):
    """score_eval.pages: whole pages of held-out parts, read as `read --page` reads them."""

    parts: Annotated[int, Field(ge=0)]  # parts the data stage cut from pages (0: none)
    split: Literal["test", "heldout"]  # whose parts
    variant: Annotated[str, Field(min_length=1)]  # the variant folder that reads them
    dpi: Annotated[int, Field(ge=50, le=600)]  # page resolution
    # each engraving the pages are read in (sonfolio/score/eval/engravings.py): lilypond,
    # verovio:<font>, either with +scan (made to look scanned or photographed: every kind) or
    # +scan:<kind>[,<kind>...] (those kinds only); the first lilypond one is the headline
    engravings: Annotated[
        list[Annotated[str, Field(pattern=f"^{ENGRAVING_PATTERN}$")]],
        Field(min_length=1),
    ]


class ScoreEval(Strict):
    """Stage eval@score: every variant on the same systems (docs/evaluation.md)."""

    splits: Annotated[list[Literal["val", "test", "heldout"]], Field(min_length=1)]
    max_samples: Positive | None  # per split, a seeded random subset; null: all
    batch_size: Positive  # systems per generate call
    decode_max_tokens: Positive  # greedy decoding limit per system
    constrained: bool  # decode under the canonical grammar (sonfolio.score.decode.grammar)
    threads: Positive | None  # CPU threads (torch and ONNX Runtime); null: all cores
    # processes the constrained CTC searches of a batch are spread over; 0: one per core
    search_workers: Annotated[int, Field(ge=0)]
    worst_examples: Annotated[int, Field(ge=0)]  # side-by-side images per variant and split
    random_examples: Annotated[int, Field(ge=0)]
    compile_batch: Positive  # systems per LilyPond process
    compile_timeout_s: Annotated[float, Field(gt=0.0)]  # per LilyPond process
    render_dpi: Annotated[int, Field(ge=50, le=600)]  # resolution of the side-by-side renders
    pages: ScoreEvalPages
    seed: int


class SpeechEvalReal(Strict):
    """speech_eval.real: the real voice (speech_data.real) read by every variant and the base,
    and the gate against the base (sonfolio.speech.eval.real)."""

    max_samples: Positive | None  # a seeded random subset; null: every clip
    max_wer_increase: Annotated[float, Field(ge=0.0)]  # vs the untouched base, absolute
    fail_on_gate: bool  # a variant past the gate fails the stage (else: marked failed)


class SpeechEval(Strict):
    """Stage eval@speech: every variant on the same clips (docs/evaluation.md)."""

    splits: Annotated[list[Literal["train", "val", "test"]], Field(min_length=1)]
    max_samples: Positive | None  # per split, a seeded random subset; null: all
    batch_size: Positive  # clips per generate call
    decode_workers: Positive  # batches decoded side by side, a thread each (ORT loop variants)
    decode_max_tokens: Positive  # greedy decoding limit per clip
    threads: Positive | None  # CPU threads (torch and ONNX Runtime); null: all cores
    worst_examples: Annotated[int, Field(ge=0)]  # per variant and split, with audio paths
    zero_shot_base: Annotated[str, Field(min_length=1)] | None  # the untouched base, scored too
    real: SpeechEvalReal
    seed: int


class EvalParams(Sections):
    """What stage eval reads: `<track>_eval`, and for the score track score_data.lilypond (the
    LilyPond that renders its predictions, the one the data stage renders with) and `infer`
    (how `read --page` cuts and decodes the whole pages it reads)."""

    score_data: ScoreData
    infer: Infer
    score_eval: ScoreEval
    speech_eval: SpeechEval
