"""The training params: train_engine and its presets, `<track>_train`, and what train reads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from sonfolio.config.base import Fraction01, Positive, Strict
from sonfolio.config.data import ScoreData
from sonfolio.config.sections import Sections


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
    preload_max_gib: Annotated[float, Field(ge=0.0)]  # auto: decode once when it fits
    group_by_length: bool  # batch train samples of like label length (less padding)
    grad_clip: Annotated[float, Field(ge=0.0)]  # max gradient norm; 0: no clipping
    nan_guard: NanGuardOptions


def _merge(base: dict, override: dict) -> dict:
    """`base` with `override` laid over it, nested mappings merged key by key."""
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
    # weight of the auxiliary CTC loss on the encoder (sonfolio/train/ctc.py); 0: none; 1: CTC
    # alone, the decoder not trained (a model that reads with its CTC head only)
    ctc_weight: Annotated[float, Field(ge=0.0, le=1.0)]
    # encoder states averaged per CTC frame (1: every state); the labels must still fit
    ctc_pool: Annotated[int, Field(ge=1, le=8)]
    seed: int

    @property
    def base_kl_weight(self) -> float:
        """Weight of the KL term towards the untouched base's outputs (sonfolio.train.
        keep_base): 0 but where a section fine-tunes a base and sets it."""
        return 0.0


class ScoreConv(Strict):
    """score_train.model.conv: the convolutional encoder (sonfolio/score/model/conv_encoder.py)."""

    # a stride-2 stem's width, then each separable block's; each halves the height
    channels: Annotated[list[Annotated[int, Field(ge=1, le=1024)]], Field(min_length=2)]
    width_pools: Annotated[int, Field(ge=0, le=8)]  # how many of them halve the width too
    layers: Annotated[int, Field(ge=0, le=24)]  # transformer layers over the frames after them


class ScoreModel(Strict):
    """The score model: a pretrained one, or a size preset built here."""

    pretrained: Annotated[str, Field(min_length=1)] | None  # hub id or local folder; null: size
    size: Literal["tiny", "small", "base"]  # presets in sonfolio/score/model/model.py
    # vit: ViT over whole-height patches; conv: conv blocks, then transformer layers
    encoder: Literal["vit", "conv"]
    image_height: Annotated[int, Field(ge=16, le=1024)]  # px; systems are padded to it
    patch: tuple[Positive, Positive]  # (height, width) of a ViT patch, px (encoder: vit)
    conv: ScoreConv  # (encoder: conv)
    # dropout of every layer (encoder and decoder); null: the size's own (model.py SIZES)
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] | None
    # dropout of the attention weights; null: `dropout`
    attention_dropout: Annotated[float, Field(ge=0.0, lt=1.0)] | None

    @model_validator(mode="after")
    def _height_divides(self) -> ScoreModel:
        check_score_input(self, None)
        return self


def check_score_input(model: ScoreModel, width: int | None) -> None:
    """The image (model.image_height x `width`, score_data.image_long_side; None: the height
    alone) divides into the encoder's patches or its conv blocks' pools, as the model built
    from a size needs (sonfolio/score/model/model.py); a pretrained model brings its own.
    Checked with the params, not when training builds the model.

    Raises:
        ValueError: naming both keys, their values and values that fit.
    """
    if model.pretrained is not None:
        return
    sides = [("height", model.image_height, "score_train.model.image_height")]
    if width is not None:
        sides.append(("width", width, "score_data.image_long_side"))
    for k, (side, size, key) in enumerate(sides):
        if model.encoder == "vit" and size % model.patch[k]:
            raise ValueError(
                f"score_train.model.patch = {list(model.patch)}: its {side} {model.patch[k]} "
                f"does not divide {key} = {size} (the ViT cuts the image into whole patches): "
                f"set the patch's {side} to one of {_divisors_near(size, model.patch[k])}, or "
                f"change {key}"
            )
        pools = len(model.conv.channels) if k == 0 else model.conv.width_pools
        if model.encoder == "conv" and size % 2**pools:
            what = "channels' blocks" if k == 0 else "width_pools"
            fix = "use fewer channels" if k == 0 else "lower width_pools"
            step = 2**pools
            near = sorted({max(step, size // step * step), (size // step + 1) * step})
            raise ValueError(
                f"score_train.model.conv halves the {side} {pools} times (its {what}): "
                f"{key} = {size} is not a multiple of {step}: set it to "
                f"{' or '.join(map(str, near))}, or {fix}"
            )


def _divisors_near(n: int, wanted: int, count: int = 4) -> list[int]:
    """The `count` divisors of `n` closest to `wanted`, largest first."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return sorted(sorted(divisors, key=lambda d: abs(d - wanted))[:count], reverse=True)


class ScoreJitter(Strict):
    """score_train.jitter: each train batch's images moved a little, afresh every step
    (sonfolio.score.model.batches.jitter)."""

    enabled: bool
    scale: Annotated[float, Field(ge=0.0, le=0.3)]  # shrunk by a factor drawn in [1 - scale, 1]
    shift_px: Annotated[float, Field(ge=0.0, le=32.0)]  # moved up to this each way (px), within
    # the margin the shrinking leaves
    rotate_deg: Annotated[float, Field(ge=0.0, le=5.0)]  # turned up to this, each way
    fade: Annotated[float, Field(ge=0.0, lt=1.0)]  # ink made up to this much lighter
    noise_std: Annotated[float, Field(ge=0.0, le=0.5)]  # Gaussian noise on every pixel


class ScoreTrain(TrainLoop):
    """score_train: the loop, the model, and how the trained model reads a system."""

    model: ScoreModel
    jitter: ScoreJitter
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
        if self.decode == "attention" and self.ctc_weight == 1:
            raise ValueError(
                "ctc_weight: 1 trains the CTC head alone and leaves the decoder untrained, but "
                "decode: attention reads with the decoder: set score_train.ctc_weight below 1 "
                "(0.7 as shipped), or decode: ctc"
            )
        return self


class SpeechModel(Strict):
    """The speech model: a Whisper checkpoint, or a size preset built here."""

    base_model: Annotated[str, Field(min_length=1)] | None  # a Whisper checkpoint; null: size
    size: Literal["tiny", "small", "base"]  # presets in sonfolio/speech/model/model.py
    language: str | None  # Whisper language token for a base model (e.g. fr); null: none
    frozen_encoder_layers: Annotated[int, Field(ge=0)]  # a base's lowest encoder blocks (and
    # its convolutions, when > 0) left as they are while the rest trains
    frozen_decoder_layers: Annotated[int, Field(ge=0)]  # a base's lowest decoder blocks (and
    # its token embeddings, tied with the output projection, when > 0) left as they are
    # what of the decoder's other blocks trains: all (and the token embeddings); blocks (token
    # embeddings and positions kept: the output's word priors stay the base's); cross_attention
    # (only each block's attention to the audio and its norm: the language model stays)
    decoder_trains: Literal["all", "blocks", "cross_attention"]

    @model_validator(mode="after")
    def _parts_of_a_base(self) -> SpeechModel:
        if self.base_model is None and self.decoder_trains != "all":
            raise ValueError(
                f"speech_train.model.decoder_trains = {self.decoder_trains!r} keeps parts of a "
                "base, but base_model is null (training from scratch): set decoder_trains: all"
            )
        return self


class SpeechTrain(TrainLoop):
    """speech_train: the loop and the model."""

    model: SpeechModel
    # weight of KL(base || model) a token beside the cross-entropy (sonfolio.train.keep_base):
    # the fine-tune held near the base's token distributions; 0: none
    keep_base: Annotated[float, Field(ge=0.0, le=100.0)]

    @property
    def base_kl_weight(self) -> float:
        return self.keep_base

    @model_validator(mode="after")
    def _keep_base_needs_a_base(self) -> SpeechTrain:
        if self.keep_base > 0 and not self.model.base_model:
            raise ValueError(
                f"speech_train.keep_base = {self.keep_base} holds the fine-tune near its base, "
                "but speech_train.model.base_model is null (training from scratch): set "
                "keep_base: 0, or name a base model"
            )
        if self.ctc_weight == 1:
            raise ValueError(
                "speech_train.ctc_weight = 1 would train the CTC head alone, but the speech "
                "model reads with its decoder: set it below 1 (0 for a Whisper base)"
            )
        return self


def engine_options(engine: EngineOptions, presets: dict[str, dict], preset: str) -> EngineOptions:
    """train_engine with the keys of train_presets.<preset> laid over it."""
    return EngineOptions.model_validate(_merge(engine.model_dump(), presets[preset]))


def check_presets(params: Sections) -> None:
    """Every train preset makes valid engine options, and every training section of `params`
    (a TrainLoop: score_train, score_qat, ...) names a preset that exists. `params` holds
    train_engine and train_presets: a stage's EngineSections, or the whole Params.

    Raises:
        ValueError: naming the preset or section, and what is wrong with it.
    """
    engine, presets = params.train_engine, params.train_presets
    for name, override in presets.items():
        try:
            engine_options(engine, presets, name)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()
            )
            raise ValueError(f"train_presets.{name} = {override}: {problems}") from None
    for stage, cfg in params:
        if not isinstance(cfg, TrainLoop):
            continue
        if cfg.preset not in presets:
            raise ValueError(
                f"{stage}.preset = {cfg.preset!r} is not a train_presets name; known: "
                f"{sorted(presets)}"
            )
        micro = engine_options(engine, presets, cfg.preset).micro_batch
        # each process's share of effective_batch is cut into micro-batches
        # (sonfolio/train/batch.py): one that does not divide the whole cannot divide a share
        if isinstance(micro, int) and cfg.effective_batch % micro:
            raise ValueError(
                f"train_engine.micro_batch = {micro} (with {stage}.preset {cfg.preset}) does not "
                f"divide {stage}.effective_batch = {cfg.effective_batch}: pick a divisor of it, "
                "or full, or auto"
            )


class EngineSections(Sections):
    """Sections of a stage that trains: train_engine and train_presets, checked together with
    the training sections a subclass declares."""

    train_engine: EngineOptions
    train_presets: dict[str, dict]

    @model_validator(mode="after")
    def _presets_valid(self) -> EngineSections:
        check_presets(self)
        return self

    def engine_options(self, preset: str) -> EngineOptions:
        """train_engine with the preset's keys laid over it."""
        return engine_options(self.train_engine, self.train_presets, preset)


class TrainParams(EngineSections):
    """What stage train reads: `<track>_train`, the engine, and the score model's input width
    (score_data.image_long_side, the width the data stage renders every system at)."""

    score_data: ScoreData
    score_train: ScoreTrain
    speech_train: SpeechTrain

    @model_validator(mode="after")
    def _width_divides(self) -> TrainParams:
        check_score_input(self.score_train.model, self.score_data.image_long_side)
        return self
