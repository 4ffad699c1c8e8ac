"""A track made ready to train: its model, datasets and the engine's Track over them.

What a track's train face gives the train and QAT steps, `sonfolio estimate`, doctor and the
train-step benchmark (`tracks.face(name, "train").training(params)`).

Each track's own side is `Training` in sonfolio/<track>/model/training.py; what both sides do
alike is
here: the datasets of every split, the engine's Track built over them (`prepare`, given how
the track's model reads), and the greedy reading of the held-out splits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

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
    """How one track trains: its `<track>_train` section and what only the track knows."""

    cfg: TrainLoop  # <track>_train

    @property
    def hub_model(self) -> str | None:
        """The hub id or folder the model starts from; None: built from `model_size`."""

    @property
    def model_size(self) -> str:
        """The size preset the model is built in (<track>_train.model.size)."""

    def check_size(self, backend: Backend) -> None:
        """Raises DeviceCannotDo for a model this device cannot train, before any work."""

    def key(self) -> dict[str, Any]:
        """What keys a resumable run besides the engine options and the input files."""

    def build_model(self, tokenizer_dir: Path) -> PreTrainedModel:
        """The configured model, untrained (doctor builds it on the meta device)."""

    def attention_kernels(self, model: PreTrainedModel) -> str:
        """The attention implementation of each part of `model`, for the logs and doctor."""

    def setup(
        self,
        data: Path,
        tokenizer_dir: Path,
        model: PreTrainedModel | None = None,
        name: str | None = None,
    ) -> Setup:
        """The seeded model (or `model`, e.g. a QAT-prepared one) and the datasets, read as
        training reads them; `name`: the stage in logs and cache keys (<track>_train)."""

    def evaluate(self, model: PreTrainedModel, setup: Setup) -> dict[str, Any]:
        """The metrics the train step adds after training: greedy decoding of the held-out
        splits against a constant guess, and how the model reads."""


@dataclass(frozen=True)
class Reading:
    """How a track's model reads its data: what `prepare` needs besides the model."""

    dataset: Callable[[list[dict[str, Any]]], Dataset]  # a split's manifest rows -> dataset
    collate: Callable[[list[Any]], dict[str, Any]]
    encoder: PreTrainedModel
    positions: int  # the encoder's sequence length (patches, or audio frames after the convs)
    shape: str  # the input's shape, for the micro-batch cache key
    processors: list[Any]  # Setup.processors: the tokenizer, then the image / audio processor


def prepare(
    model: PreTrainedModel,
    reading: Reading,
    data: Path,
    eval_splits: tuple[str, ...],
    track: str,
    name: str | None,
    kernels: str,
) -> Setup:
    """The Setup of `model` over the datasets of every split of `data`'s manifest;
    `name`: the stage in logs and cache keys (default <track>_train); `kernels`: the model's
    attention implementations, for the log.

    Raises:
        ValueError: the manifest has no train or no val rows.
    """
    manifest = data / "manifest.jsonl"
    sets = split_sets(read_jsonl(manifest), reading.dataset, eval_splits, manifest, f"data@{track}")
    engine = engine_track(model, sets, reading, name or f"{track}_train")
    log.info(
        "%s model: %.2f M parameters; attention: %s",
        track,
        model.num_parameters() / 1e6,
        kernels,
    )
    return Setup(engine, sets, reading.processors[0], reading.processors)


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
