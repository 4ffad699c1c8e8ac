"""Typed params: pydantic models that mirror params.yaml, a section per stage.

Every stage calls `load_params()` before it does any work, so a bad value in params.yaml (or
one set with `dvc exp run -S key=value`, which edits params.yaml) fails at once with the key,
the value and what is allowed. Unknown keys are rejected (`extra="forbid"`): a typo is an
error, not a silently ignored setting. `sonfolio check-params` runs the same validation alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Fraction01 = Annotated[float, Field(ge=0.0, le=1.0)]
Positive = Annotated[int, Field(gt=0)]

SCORE_EXTENSIONS = (".xml", ".musicxml", ".mxl", ".krn", ".abc")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrackPaths(Strict):
    """Where one track's steps write: paths.tracks.<track>. dvc.yaml runs every step once per
    entry (foreach: ${paths.tracks}), so a new track's paths are one entry here."""

    data: Path  # data: images or audio, manifest.jsonl
    tokenizer: Path  # tokenizer (and image processor / feature extractor)
    model: Path  # train: the FP32 save_pretrained folder
    qat: Path  # qat: one QAT-trained HF model folder per scheme (int8/, int4/)
    export: Path  # export: ONNX variant folders (fp32/, int8_ptq/, int4_ptq/, ...)
    eval: Path  # eval: samples/ (side-by-side examples, predictions), quality.csv


# Keys of the flat layout before paths.tracks (changelog: docs/architecture.md), named in the
# error so that an old params.yaml says where its key went.
_MOVED_PATHS = {
    f"{track}_{kind}": f"paths.tracks.{track}.{kind}"
    for track in ("score", "speech")
    for kind in ("data", "tokenizer", "model", "qat", "export", "eval")
}


class Paths(Strict):
    """Where each stage writes; dvc.yaml reads the same keys as ${paths.*}."""

    tracks: dict[str, TrackPaths]
    checkpoints: Path
    live: Path
    metrics: Path
    download_cache: Path
    report: Path  # report: index.html, assets/, <track>_latency.csv (docs/report.md)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            moved = [f"paths.{k} is now {_MOVED_PATHS[k]}" for k in raw if k in _MOVED_PATHS]
            if moved:
                raise ValueError("; ".join(moved) + " (params.yaml: one entry per track)")
        return raw

    def track(self, name: str) -> TrackPaths:
        """paths.tracks.<name>; a ValueError names the known tracks."""
        if name not in self.tracks:
            raise ValueError(f"no track {name!r} in paths.tracks; known: {sorted(self.tracks)}")
        return self.tracks[name]

    def with_track(self, name: str, **updates: Path) -> Paths:
        """A copy with some of one track's paths replaced (a test's or a command's own)."""
        tracks = {**self.tracks, name: self.track(name).model_copy(update=updates)}
        return self.model_copy(update={"tracks": tracks})


class ScoreSource(Strict):
    """One collection of music: music21's shipped corpus, a folder, or an archive.

    The collection `name` is what `split.heldout_collections` refers to.
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]
    music21: str | None = Field(
        default=None, description="a folder of music21's corpus, e.g. 'bach' or 'essenFolksong'"
    )
    folder: Path | None = None
    archive: str | None = Field(default=None, description="path or http(s) URL of .zip / .tar.*")
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    max_pieces: Positive | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScoreSource:
        kinds = [k for k in ("music21", "folder", "archive") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                f"source {self.name!r} must set exactly one of music21, folder, archive "
                f"(it sets {kinds or 'none'})"
            )
        if self.archive is not None and self.sha256 is None:
            raise ValueError(
                f"source {self.name!r}: an archive needs its sha256 (run `sha256sum FILE`), so a "
                "changed or truncated download is caught"
            )
        return self


class Augment(Strict):
    """Scan-like degradation, applied to the train split only, seeded per image."""

    enabled: bool
    noise_std: Annotated[float, Field(ge=0.0, le=0.5)]  # gaussian noise, in units of full white
    blur_radius: Annotated[float, Field(ge=0.0, le=5.0)]  # max gaussian blur radius, px
    rotation_deg: Annotated[float, Field(ge=0.0, le=10.0)]  # max absolute rotation
    ink: Fraction01  # strength of uneven ink (patchy fading), 0 = none


class ScoreSplit(Strict):
    val: Annotated[float, Field(ge=0.0, lt=0.5)]
    test: Annotated[float, Field(ge=0.0, lt=0.5)]
    heldout_collections: list[str]
    seed: int


class ScoreData(Strict):
    sources: Annotated[list[ScoreSource], Field(min_length=1)]
    synthetic_fraction: Annotated[float, Field(ge=0.0, lt=1.0)]
    bars_per_system: Annotated[int, Field(ge=1, le=16)]
    image_long_side: Annotated[int, Field(ge=64, le=4096)]
    resolution_dpi: Annotated[int, Field(ge=50, le=1200)]
    augment: Augment
    split: ScoreSplit
    max_skip_fraction: Fraction01
    systems_per_process: Annotated[int, Field(ge=1, le=2000)]
    workers: Annotated[int, Field(ge=0)]  # 0: one per CPU core
    lilypond: str | None  # null: the binary from `pip install lilypond`, else PATH
    seed: int

    @model_validator(mode="after")
    def _heldout_known(self) -> ScoreData:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"score_data.sources: collection names repeat: {names}")
        unknown = set(self.split.heldout_collections) - set(names)
        if unknown:
            raise ValueError(
                f"score_data.split.heldout_collections names {sorted(unknown)}, which no source "
                f"defines; known collections: {names}"
            )
        if self.split.val + self.split.test >= 0.9:
            raise ValueError("score_data.split: val + test must leave at least 10% for train")
        return self


class ScoreTokenizer(Strict):
    vocab_size: Annotated[int, Field(ge=64, le=200_000)]
    min_frequency: Annotated[int, Field(ge=1)]
    model_max_length: Annotated[int, Field(ge=16)]


VoiceVariant = Annotated[str, Field(pattern=r"^[A-Za-z0-9_ -]+$")]  # espeak-ng's voices/!v/


def _check_range(key: str, pair: tuple[float, float]) -> None:
    if pair[0] > pair[1]:
        raise ValueError(
            f"{key} = {list(pair)}: write [minimum, maximum], e.g. {[pair[1], pair[0]]}"
        )


class SpeechSynthetic(Strict):
    """French sentences spoken by espeak-ng: the offline default source."""

    utterances: Annotated[int, Field(ge=20)]  # over all splits; one sentence each
    val_fraction: Annotated[float, Field(gt=0.0, lt=0.5)]  # own sentences, train voices
    test_fraction: Annotated[float, Field(gt=0.0, lt=0.5)]  # own sentences AND own voices
    train_voices: Annotated[list[VoiceVariant], Field(min_length=1)]  # train and val splits
    test_voices: Annotated[list[VoiceVariant], Field(min_length=1)]  # test split only
    rate_wpm: tuple[Annotated[int, Field(ge=80, le=450)], Annotated[int, Field(ge=80, le=450)]]
    pitch: tuple[Annotated[int, Field(ge=0, le=99)], Annotated[int, Field(ge=0, le=99)]]
    noise_fraction: Fraction01  # share of clips with added white noise
    snr_db: tuple[Annotated[float, Field(ge=-5, le=60)], Annotated[float, Field(ge=-5, le=60)]]
    digits_fraction: Fraction01  # share of numbers written "12" rather than "douze"

    @model_validator(mode="after")
    def _consistent(self) -> SpeechSynthetic:
        key = "speech_data.synthetic"
        shared = sorted(set(self.train_voices) & set(self.test_voices))
        if shared:
            raise ValueError(
                f"{key}.test_voices shares {shared} with train_voices: the test split must be "
                "spoken by voices training never hears; list each variant in only one of them"
            )
        for name in ("rate_wpm", "pitch", "snr_db"):
            _check_range(f"{key}.{name}", getattr(self, name))
        if self.val_fraction + self.test_fraction > 0.5:
            raise ValueError(f"{key}: val_fraction + test_fraction must leave half for train")
        for name in ("val_fraction", "test_fraction"):
            if round(self.utterances * getattr(self, name)) < 1:
                raise ValueError(
                    f"{key}.{name} = {getattr(self, name)} of {self.utterances} utterances is "
                    "less than one: raise utterances or the fraction"
                )
        return self


class HubSplits(Strict):
    """The corpus's split for each of ours; null leaves that split empty."""

    train: str
    val: str | None
    test: str | None


class SpeechHub(Strict):
    """A corpus loaded with `datasets.load_dataset(name, config)`: a hub id or a local folder."""

    name: Annotated[str, Field(min_length=1)]
    config: str | None
    splits: HubSplits
    max_samples: Positive | None  # per split; null: all
    streaming: bool
    audio_column: str
    text_column: str
    speaker_column: str | None


class SpeechData(Strict):
    source: Literal["synthetic", "hub"]
    max_duration_s: Annotated[float, Field(gt=0.0, le=30.0)]  # longer clips are skipped
    max_skip_fraction: Fraction01
    workers: Annotated[int, Field(ge=0)]  # 0: one per CPU core
    seed: int
    synthetic: SpeechSynthetic
    hub: SpeechHub


class SpeechTokenizer(Strict):
    base_model: Annotated[str, Field(min_length=1)] | None  # null: BPE + features built here
    vocab_size: Annotated[int, Field(ge=300, le=200_000)]  # > 256 bytes + special tokens
    min_frequency: Annotated[int, Field(ge=1)]
    model_max_length: Annotated[int, Field(ge=16)]
    num_mel_bins: Literal[80, 128]
    chunk_length_s: Annotated[int, Field(ge=1, le=30)]  # the model's input window, seconds


class NanGuardOptions(Strict):
    """NaN / Inf recovery: skip the step and back the lr off; roll back after a streak."""

    enabled: bool
    lr_backoff: Annotated[float, Field(gt=0.0, le=1.0)]  # lr multiplier per bad step
    max_bad_steps: Positive  # bad steps in a row before rolling back to the last checkpoint
    max_rollbacks: Annotated[int, Field(ge=0)]  # then the stage fails


class EngineOptions(Strict):
    """How a training stage runs (not what it learns): train_engine, updated by a preset."""

    precision: Literal["auto", "bf16", "fp16", "fp32"]
    micro_batch: Literal["auto", "full"] | Positive  # auto: largest that fits; full: no accum.
    gradient_checkpointing: bool
    compile: bool
    optimizer: Literal["adamw", "adamw_8bit"]
    fp8: bool
    loader_workers: Literal["auto"] | Annotated[int, Field(ge=0)]
    group_by_length: bool  # batch train samples of like label length (less padding)
    grad_clip: Annotated[float, Field(ge=0.0)]  # max gradient norm; 0: no clipping
    nan_guard: NanGuardOptions


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if nested else value
    return out


class TrainLoop(Strict):
    """What both training stages share: the preset, the schedule, checkpoints, early stopping."""

    preset: str  # a name in train_presets
    effective_batch: Positive  # samples per optimizer step, over all processes
    lr: Annotated[float, Field(gt=0.0, lt=1.0)]
    weight_decay: Annotated[float, Field(ge=0.0)]
    warmup_steps: Annotated[int, Field(ge=0)]
    max_steps: Positive  # optimizer steps
    eval_every: Positive  # steps between validation losses
    checkpoint_every: Positive  # steps between resumable checkpoints
    early_stopping_patience: Positive  # evaluations without a better val loss before stopping
    log_every: Positive  # steps between log lines and DVCLive points
    max_skip_fraction: Fraction01  # corrupt train samples allowed (of the train set)
    decode_max_tokens: Positive  # greedy decoding length limit for the held-out error rate
    # weight of the auxiliary CTC loss on the encoder (sonfolio/train/ctc.py); 0: none
    ctc_weight: Annotated[float, Field(ge=0.0, lt=1.0)]
    # encoder states averaged per CTC frame (1: every state); the labels must still fit
    ctc_pool: Annotated[int, Field(ge=1, le=8)]
    seed: int


class ScoreModel(Strict):
    pretrained: Annotated[str, Field(min_length=1)] | None  # hub id or local folder; null: size
    size: Literal["tiny", "small", "base"]  # presets in sonfolio/score/model.py
    image_height: Annotated[int, Field(ge=16, le=1024)]  # px; systems are padded to it
    patch: tuple[Positive, Positive]  # (height, width) of a ViT patch, px


class ScoreTrain(TrainLoop):
    model: ScoreModel
    # how the trained model reads a system (sonfolio/train/ctc.py): ctc: greedy over its
    # encoder's CTC head; attention: its decoder, token by token
    decode: Literal["ctc", "attention"]

    @model_validator(mode="after")
    def _ctc_head(self) -> ScoreTrain:
        if self.decode == "ctc" and self.ctc_weight == 0:
            raise ValueError(
                "decode: ctc reads with the CTC head, which ctc_weight: 0 never trains: set "
                "score_train.ctc_weight above 0 (0.7 as shipped), or decode: attention"
            )
        return self


class SpeechModel(Strict):
    base_model: Annotated[str, Field(min_length=1)] | None  # a Whisper checkpoint; null: size
    size: Literal["tiny", "small", "base"]  # presets in sonfolio/speech/model.py
    language: str | None  # Whisper language token for a base model (e.g. fr); null: none


class SpeechTrain(TrainLoop):
    model: SpeechModel


class QatTrain(TrainLoop):
    """A QAT fine-tune of the trained FP32 model (sonfolio/qat.py), once per scheme."""

    schemes: Annotated[list[Literal["int8", "int4"]], Field(min_length=1)]
    int4_group_size: Literal[16, 32, 64, 128]  # input columns sharing one int4 scale

    @model_validator(mode="after")
    def _unique(self) -> QatTrain:
        if len(set(self.schemes)) != len(self.schemes):
            raise ValueError(f"schemes {self.schemes} lists a scheme twice")
        return self


class PageSplit(Strict):
    """Cutting a page image into staff systems (sonfolio/infer/page.py)."""

    staff_line_fraction: Annotated[float, Field(gt=0.0, le=1.0)]  # of the ink's width
    min_staff_lines: Annotated[int, Field(ge=1, le=16)]  # lines in a group to count as a staff
    max_skew_deg: Annotated[float, Field(ge=0.0, le=10.0)]  # tilt straightened before cutting


class AudioChunks(Strict):
    """Cutting long audio into windows the speech model takes (sonfolio/infer/audio.py)."""

    search_s: Annotated[float, Field(gt=0.0)]  # the quietest point this close to the limit
    silence_db: Annotated[float, Field(lt=0.0)]  # dB below the clip's loudest frame
    overlap_s: Annotated[float, Field(ge=0.0)]  # chunks cut outside a silence overlap this much


class Infer(Strict):
    """`sonfolio read`, `sonfolio transcribe` and the service (docs/inference.md)."""

    variant: Annotated[str, Field(min_length=1)]  # default exported variant folder name
    score_max_tokens: Positive  # greedy decoding limit per system
    speech_max_tokens: Positive  # greedy decoding limit per audio chunk
    batch_size: Positive  # systems or chunks per generate call
    page: PageSplit
    audio: AudioChunks


class Serve(Strict):
    """`sonfolio serve`: where it listens and what it accepts."""

    host: Annotated[str, Field(min_length=1)]
    port: Annotated[int, Field(ge=1, le=65535)]
    max_upload_mb: Annotated[float, Field(gt=0.0)]  # larger uploads get 413


class Export(Strict):
    """ONNX export and ORT quantization, shared by every track's export (export@score, ...)."""

    opset: Annotated[int, Field(ge=14, le=21)]  # ONNX opset of the export
    quantize: list[Literal["int8", "int4"]]  # variants made from each exported model
    per_channel: bool  # int8: one scale per output channel (else per tensor)
    # int8 weights within [-64, 64] (7) or [-127, 127] (8); 8 saturates on x86 without VNNI
    int8_weight_bits: Literal[7, 8]
    int4_block_size: Literal[16, 32, 64, 128, 256]  # int4: weights per scale (along K)
    int4_symmetric: bool  # int4: no zero point
    int4_accuracy_level: Literal[0, 1, 2, 3, 4]  # MatMulNBits compute type; 4: int8 (fastest)


class TrackExport(Strict):
    """What the model card and the upload command of one track say."""

    hub_repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]
    license: Annotated[str, Field(min_length=1)]
    language: list[str]  # ISO codes for the card; [] for none


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
    max_ter_increase: Annotated[float, Field(ge=0.0)]  # vs torch FP32, absolute (0.01 = 1 point)


class SpeechBench(Strict):
    max_wer_increase: Annotated[float, Field(ge=0.0)]  # vs torch FP32, absolute
    ctranslate2: bool  # also measure the CTranslate2 int8 peer (faster-whisper's engine)


class ScoreEval(Strict):
    """Stage eval@score: every variant on the same systems (docs/evaluation.md)."""

    splits: Annotated[list[Literal["val", "test", "heldout"]], Field(min_length=1)]
    max_samples: Positive | None  # per split, a seeded random subset; null: all
    batch_size: Positive  # systems per generate call
    decode_max_tokens: Positive  # greedy decoding limit per system
    threads: Positive | None  # CPU threads (torch and ONNX Runtime); null: all cores
    worst_examples: Annotated[int, Field(ge=0)]  # side-by-side images per variant and split
    random_examples: Annotated[int, Field(ge=0)]
    compile_batch: Positive  # systems per LilyPond process
    compile_timeout_s: Annotated[float, Field(gt=0.0)]  # per LilyPond process
    render_dpi: Annotated[int, Field(ge=50, le=600)]  # resolution of the side-by-side renders
    seed: int


class SpeechEval(Strict):
    """Stage eval@speech: every variant on the same clips (docs/evaluation.md)."""

    splits: Annotated[list[Literal["train", "val", "test"]], Field(min_length=1)]
    max_samples: Positive | None  # per split, a seeded random subset; null: all
    batch_size: Positive  # clips per generate call
    decode_max_tokens: Positive  # greedy decoding limit per clip
    threads: Positive | None  # CPU threads (torch and ONNX Runtime); null: all cores
    worst_examples: Annotated[int, Field(ge=0)]  # per variant and split, with audio paths
    seed: int


class EstimateSteps(Strict):
    score: Positive
    speech: Positive


class Estimate(Strict):
    """`sonfolio estimate` (docs/cost.md): measured steps priced on cloud GPUs. Not a stage."""

    steps: Positive  # timed optimizer steps per track
    warmup_steps: Annotated[int, Field(ge=0)]  # untimed steps first (allocator, compile)
    full_run_steps: EstimateSteps  # a real-scale run, priced beside the stage's max_steps
    prices: Path | None  # a price table (YAML); null: sonfolio/gpu_prices.yaml


class Report(Strict):
    """Stage report: one HTML page per run from the stages' outputs (docs/report.md)."""

    title: Annotated[str, Field(min_length=1)]
    sample_variant: Annotated[str, Field(min_length=1)]  # whose eval samples are shown
    score_samples: Annotated[int, Field(ge=0, le=50)]  # side-by-side images per kind and split
    speech_worst: Annotated[int, Field(ge=0, le=100)]  # worst clips per split, with audio
    dpi: Annotated[int, Field(ge=50, le=300)]  # resolution of the plots


class Params(Strict):
    paths: Paths
    score_data: ScoreData
    score_tokenizer: ScoreTokenizer
    speech_data: SpeechData
    speech_tokenizer: SpeechTokenizer
    train_engine: EngineOptions
    train_presets: dict[str, dict]
    score_train: ScoreTrain
    speech_train: SpeechTrain
    score_qat: QatTrain
    speech_qat: QatTrain
    export: Export
    score_export: TrackExport
    speech_export: TrackExport
    bench: Bench
    score_bench: ScoreBench
    speech_bench: SpeechBench
    score_eval: ScoreEval
    speech_eval: SpeechEval
    infer: Infer
    serve: Serve
    estimate: Estimate
    report: Report

    @model_validator(mode="after")
    def _presets_valid(self) -> Params:
        for name, override in self.train_presets.items():
            try:
                self.engine_options(name)
            except ValidationError as err:
                problems = "; ".join(
                    f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()
                )
                raise ValueError(f"train_presets.{name} = {override}: {problems}") from None
        for stage in ("score_train", "speech_train", "score_qat", "speech_qat"):
            preset = getattr(self, stage).preset
            if preset not in self.train_presets:
                raise ValueError(
                    f"{stage}.preset = {preset!r} is not a train_presets name; known: "
                    f"{sorted(self.train_presets)}"
                )
        return self

    @model_validator(mode="after")
    def _tracks_have_sections(self) -> Params:
        for track in self.paths.tracks:
            missing = [f"{track}_{s}" for s in TRACK_STEPS if not hasattr(self, f"{track}_{s}")]
            if missing:
                raise ValueError(
                    f"paths.tracks.{track} has no params sections {missing}: a track needs one "
                    "per step (docs/architecture.md, adding a track)"
                )
        return self

    def section(self, track: str, step: str) -> Any:
        """The params section of one step for one track: `<track>_<step>` (score_train)."""
        self.paths.track(track)  # an unknown track names the known ones
        return getattr(self, f"{track}_{step}")

    def engine_options(self, preset: str) -> EngineOptions:
        """train_engine with the preset's keys laid over it."""
        base = self.train_engine.model_dump()
        return EngineOptions.model_validate(_merge(base, self.train_presets[preset]))

    @model_validator(mode="after")
    def _clips_fit_the_window(self) -> Params:
        # Checked here, before synthesis, not only when the tokenizer stage sees the clips.
        longest, window = self.speech_data.max_duration_s, self.speech_tokenizer.chunk_length_s
        if self.speech_tokenizer.base_model is None and longest > window:
            raise ValueError(
                f"speech_data.max_duration_s = {longest} is longer than the model's input "
                f"window speech_tokenizer.chunk_length_s = {window}: lower the first or raise "
                "the second"
            )
        return self


# The steps with a params section per track (`<track>_<step>`); data, tokenizer, train, qat,
# export, bench and eval run once per entry of paths.tracks.
TRACK_STEPS = ("data", "tokenizer", "train", "qat", "export", "bench", "eval")


class ParamsError(ValueError):
    """params.yaml is missing, unreadable or invalid; the message lists every problem."""


def _describe(err: ValidationError, origin: str) -> str:
    lines = [f"{origin} is invalid ({err.error_count()} problem(s)):"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"  - {key}: unknown key (remove it, or check its spelling)")
        elif e["type"] == "missing":
            lines.append(f"  - {key}: missing (add it to {origin})")
        elif e["type"] == "value_error":  # our own validators: the message names the values
            lines.append(f"  - {key}: {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"  - {key} = {e.get('input')!r}: {e['msg']}")
    return "\n".join(lines)


def parse_params(raw: object, origin: str = "params.yaml") -> Params:
    """Validate an already-loaded params mapping."""
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(_describe(err, origin)) from None


def load_params(path: Path | str = "params.yaml") -> Params:
    """Read and validate params.yaml.

    Raises:
        ParamsError: naming every bad key, its value and what is allowed.
    """
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path} not found: run from the project root, or pass its path")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ParamsError(f"{path} is not valid YAML: {err}") from None
    return parse_params(raw, str(path))
