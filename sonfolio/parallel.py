"""Process pools with a progress bar, for stages whose work is single-threaded per item
(music21, LilyPond, espeak-ng): one process per core, results in input order."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

T = TypeVar("T")
R = TypeVar("R")


def worker_count(configured: int) -> int:
    if configured:
        return configured
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def progress() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )


def pool_map(fn: Callable[[T], R], items: Sequence[T], workers: int, label: str) -> Iterable[R]:
    """Map in a process pool (in order) with a progress bar; in-process when workers == 1."""
    with progress() as bar:
        task = bar.add_task(label, total=len(items))
        if workers == 1:
            for item in items:
                yield fn(item)
                bar.advance(task)
            return
        ctx = multiprocessing.get_context("fork")  # workers inherit the imported modules
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            for res in pool.map(fn, items, chunksize=1):
                yield res
                bar.advance(task)


def batched(items: Sequence[T], n: int) -> list[Sequence[T]]:
    return [items[i : i + n] for i in range(0, len(items), n)]
