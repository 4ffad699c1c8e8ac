"""Speech from a corpus that `datasets` loads: a hub id, or a local folder in the hub's layout.

The default is Multilingual LibriSpeech French (`facebook/multilingual_librispeech`, config
`french`): parquet files whose audio column holds FLAC bytes. A local copy of that repository
(its parquet files and README.md, e.g. from `hf download ... --repo-type dataset`) loads the
same way with `load_dataset(folder, config)`, with no network. Audio is read with the column
cast to `Audio(decode=False)` and decoded here (soundfile), because datasets 5 decodes with
torchcodec and FFmpeg, which this project does not need. Rows are read in order, so
`max_samples` takes the first N of each split; decoding runs in this process (a 16 kHz FLAC
clip decodes in about a millisecond: the download, not the CPU, sets the pace).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from datasets import Audio, IterableDataset, load_dataset

from sonfolio.parallel import progress
from sonfolio.speech.common.audio import SAMPLE_RATE, AudioError, decode, to_pcm16, write_wav
from sonfolio.speech.common.normalize import normalize, unify
from sonfolio.speech.data.clips import SPLITS, Skip, Utterance, audio_path

if TYPE_CHECKING:
    from sonfolio.config.data import SpeechData, SpeechHub

log = logging.getLogger(__name__)


class DatasetUnavailable(RuntimeError):
    """The configured corpus could not be opened; the message says what to configure."""


def _unavailable(cfg: SpeechHub, split: str, err: Exception) -> str:
    return (
        f"speech_data.hub.name = {cfg.name!r} (config {cfg.config!r}, split {split!r}) could "
        f"not be loaded: {err}\nSet speech_data.hub.name to a local folder (a copy of the hub "
        "repository: its parquet files and README.md, see docs/speech.md), fix "
        "speech_data.hub.config / speech_data.hub.splits, or run where the hub is reachable "
        "(unset HF_HUB_OFFLINE; check the network, HF_ENDPOINT or HF_TOKEN). "
        "speech_data.source: synthetic needs neither."
    )


def open_split(cfg: SpeechHub, split: str) -> Iterable[dict[str, Any]]:
    """The rows of one corpus split (the first `max_samples`), audio left undecoded.

    Raises:
        DatasetUnavailable: the corpus, config, split or a configured column is not there.
    """
    try:
        ds = load_dataset(cfg.name, cfg.config, split=split, streaming=cfg.streaming)
    except (OSError, ValueError) as err:  # not found, offline, unknown config or split
        raise DatasetUnavailable(_unavailable(cfg, split, err)) from err
    wanted = {
        "audio_column": cfg.audio_column,
        "text_column": cfg.text_column,
        "speaker_column": cfg.speaker_column,
    }
    columns = ds.column_names or []
    missing = {k: v for k, v in wanted.items() if v is not None and columns and v not in columns}
    if missing:
        keys = ", ".join(f"speech_data.hub.{k} = {v!r}" for k, v in missing.items())
        raise DatasetUnavailable(
            f"{cfg.name} split {split!r} has no column for {keys}; its columns: {columns}"
        )
    ds = ds.cast_column(cfg.audio_column, Audio(decode=False))
    if cfg.max_samples is None:
        return ds
    if isinstance(ds, IterableDataset):
        return ds.take(cfg.max_samples)
    return ds.select(range(min(cfg.max_samples, len(ds))))  # Dataset.take fails past the end


def _clip(
    row: dict[str, Any], cfg: SpeechHub, item: str, max_s: float
) -> tuple[np.ndarray, str] | str:
    """16 kHz samples and the text of one row, or the reason it cannot be used."""
    text = unify(str(row.get(cfg.text_column) or "")).strip()
    audio = row.get(cfg.audio_column) or {}
    if not normalize(text):
        return "empty_text"
    data = audio.get("bytes")
    if data is None:
        if not audio.get("path"):
            return "missing_audio"
        data = Path(audio["path"])
    try:
        x = decode(data)
    except AudioError as err:
        log.debug("%s: %s", item, err)
        return err.reason
    if x.size / SAMPLE_RATE > max_s:
        return "too_long"
    return x, text


def _rows(cfg: SpeechHub) -> Iterator[tuple[str, str, int, dict[str, Any]]]:
    for ours in SPLITS:
        theirs = getattr(cfg.splits, ours)
        if theirs is not None:
            for i, row in enumerate(open_split(cfg, theirs)):
                yield ours, theirs, i, row


def build(cfg: SpeechData, out: Path) -> tuple[list[Utterance], list[Skip]]:
    """Decode, convert and write every row of the configured splits into `out`."""
    hub = cfg.hub
    splits = [s for s in SPLITS if getattr(hub.splits, s) is not None]
    total = hub.max_samples * len(splits) if hub.max_samples else None
    rows: list[Utterance] = []
    skips: list[Skip] = []
    counts = dict.fromkeys(SPLITS, 0)
    with progress() as bar:
        task = bar.add_task(f"reading {hub.name}", total=total)
        for ours, theirs, i, row in _rows(hub):
            item = f"{theirs}[{i}] {(row.get(hub.audio_column) or {}).get('path') or ''}".strip()
            got = _clip(row, hub, item, cfg.max_duration_s)
            bar.advance(task)
            if isinstance(got, str):
                skips.append(Skip(item, got))
                continue
            x, text = got
            rel = audio_path(ours, counts[ours])
            counts[ours] += 1
            write_wav(out / rel, to_pcm16(x))
            speaker = str(row.get(hub.speaker_column, "")) if hub.speaker_column else ""
            rows.append(
                Utterance(rel, text, normalize(text), round(x.size / SAMPLE_RATE, 3), speaker, ours)
            )
    return rows, skips
