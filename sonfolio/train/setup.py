"""A track made ready to train: its model, datasets and the engine's Track over them.

What a track's train face gives the train and QAT steps, `sonfolio estimate`, doctor and the
train-step benchmark (`tracks.face(name, "train").training(params)`).

Each track's own side is a `Training` in sonfolio/<track>/model/training.py: its model and
how that model reads the data (`Training.reading`). What both sides do alike is here: the
datasets of every split and the engine's Track built over them (`Training.setup`, which a
track's class inherits), and the greedy reading of the held-out splits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sonfolio.evaluation import greedy_decode
from sonfolio.io import read_jsonl
from sonfolio.train.device import Backend
from sonfolio.train.run import Track

if TYPE_CHECKING:
    from sonfolio.config.train import TrainLoop

log = logging.getLogger(__name__)


@dataclass
class Setup:
    """A track ready to train: the engine's Track, the datasets of every split (the decoded
    held-out ones included), and what is saved beside the model."""

    track: Track
    sets: dict[str, Any]
    tokenizer: PreTrainedTokenizerBase
    # saved with the model, in this order: the tokenizer, then the image processor or
    # feature extractor that turns a raw input into what the model reads
    processors: list[Any]


class Training(Protocol):
    """How one track trains: its `<track>_train` section and what only the track knows. A
    track's class subclasses it for what every track does alike (`model_size`, `setup`)."""

    cfg: TrainLoop  # <track>_train
    track: ClassVar[str]  # the track's name: its data come from data@<track>
    eval_splits: ClassVar[tuple[str, ...]]  # the held-out splits decoded after training

    @property
    def hub_model(self) -> str | None:
        """The hub id or folder the model starts from; None: built from `model_size`."""

    @property
    def model_size(self) -> str:
        """The size preset the model is built in (<track>_train.model.size)."""
        return self.cfg.model.size  # every <track>_train has a model section

    def check_size(self, backend: Backend) -> None:
        """Raises DeviceCannotDo for a model this device cannot train, before any work."""

    def key(self) -> dict[str, Any]:
        """What keys a resumable run besides the engine options and the input files."""

    def build_model(self, tokenizer_dir: Path) -> PreTrainedModel:
        """The configured model, untrained (doctor builds it on the meta device)."""

    def attention_kernels(self, model: PreTrainedModel) -> str:
        """The attention implementation of each part of `model`, for the logs and doctor."""

    def reading(
        self, data: Path, tokenizer_dir: Path, model: PreTrainedModel | None
    ) -> tuple[PreTrainedModel, Reading]:
        """The model to train, seeded and built (or `model`, e.g. a QAT-prepared one, made
        ready to train further), and how it reads `data`."""

    def setup(
        self,
        data: Path,
        tokenizer_dir: Path,
        model: PreTrainedModel | None = None,
        name: str | None = None,
    ) -> Setup:
        """The seeded model (or `model`, e.g. a QAT-prepared one) and the datasets of every
        split of `data`'s manifest, read as training reads them; `name`: the stage in logs and
        cache keys (default <track>_train).

        Raises:
            ValueError: the manifest has no train or no val rows.
        """
        model, reading = self.reading(data, tokenizer_dir, model)
        kernels = self.attention_kernels(model)
        manifest = data / "manifest.jsonl"
        rows = read_jsonl(manifest)
        sets = split_sets(rows, reading.dataset, self.eval_splits, manifest, f"data@{self.track}")
        engine = engine_track(model, sets, reading, name or f"{self.track}_train")
        log.info(
            "%s model: %.2f M parameters; attention: %s",
            self.track,
            model.num_parameters() / 1e6,
            kernels,
        )
        return Setup(engine, sets, reading.processors[0], reading.processors)

    def evaluate(self, model: PreTrainedModel, setup: Setup) -> dict[str, Any]:
        """The metrics the train step adds after training: greedy decoding of the held-out
        splits against a constant guess, and how the model reads."""


@dataclass(frozen=True)
class Reading:
    """How a track's model reads its data: what `Training.setup` needs besides the model."""

    dataset: Callable[[list[dict[str, Any]]], Dataset]  # a split's manifest rows -> dataset
    collate: Callable[[list[Any]], dict[str, Any]]
    encoder: PreTrainedModel
    positions: int  # the encoder's sequence length (patches, or audio frames after the convs)
    shape: str  # the input's shape, for the micro-batch cache key
    processors: list[Any]  # Setup.processors: the tokenizer, then the image / audio processor
    # a train batch -> the same batch changed afresh each step (train only); None: as read
    augment: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def split_sets(
    rows: list[dict[str, Any]],
    make: Callable[[list[dict[str, Any]]], Dataset],
    eval_splits: tuple[str, ...],
    manifest: Path,
    data_stage: str,
) -> dict[str, Any]:
    """A dataset per split (train, val and the decoded `eval_splits`) of the manifest's rows.

    Raises:
        ValueError: no train or no val rows (the message names the stage that makes them).
    """
    sets = {
        split: make([r for r in rows if r["split"] == split])
        for split in ("train", "val", *eval_splits)
    }
    if not len(sets["train"]) or not len(sets["val"]):
        raise ValueError(f"{manifest} needs train and val rows: rerun `dvc repro {data_stage}`")
    return sets


def engine_track(
    model: PreTrainedModel, sets: dict[str, Any], reading: Reading, name: str
) -> Track:
    """The engine's Track over the train and val sets."""
    train_set = sets["train"]
    longest = train_set[train_set.longest()]
    mean_tokens = sum(map(len, train_set.labels)) / len(train_set)
    enc = reading.encoder.num_parameters()
    dec = model.num_parameters() - enc
    collate = reading.collate
    return Track(
        model=model,
        train_set=train_set,
        val_set=sets["val"],
        collate=collate,
        probe_batch=lambda n: collate([longest] * n),
        # ~6 x params x tokens: the encoder runs over its positions, the decoder per label
        flops_per_sample=6 * (enc * reading.positions + dec * mean_tokens),
        shape=reading.shape,
        name=name,
        lengths=[len(x) for x in train_set.labels],
        augment=reading.augment,
    )


def read_splits(
    model: PreTrainedModel,
    setup: Setup,
    splits: tuple[str, ...],
    input_key: str,
    max_new_tokens: int,
    generate: Callable[..., Any] | None = None,
) -> Iterator[tuple[str, Any, list[dict[str, Any]], list[str]]]:
    """(split, dataset, rows, texts) of greedy decoding for each non-empty split of `splits`:
    the manifest rows it read (unreadable samples are left out) and the texts it read."""
    for split in splits:
        dataset = setup.sets[split]
        if not len(dataset):
            continue
        loader = DataLoader(dataset, batch_size=64, collate_fn=setup.track.collate)
        done, hyps = greedy_decode(
            model, loader, setup.tokenizer, input_key, max_new_tokens, len(dataset), generate
        )
        yield split, dataset, [dataset.rows[i] for i in done], hyps
