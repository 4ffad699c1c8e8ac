"""Process pools with a progress bar, for stages whose work is single-threaded per item
(music21, LilyPond, espeak-ng): one process per core, results in input order.

Why not `concurrent.futures.ProcessPoolExecutor`: it cannot stop one task. A hostile file can
keep music21 busy for many minutes (issue 19: a 300 KB .mxl ran for 10 minutes past 8 GB), and
only killing the process that parses it stops it, so each worker here is a process the pool
owns and kills when its item runs past `time_limit_s`; the item is then reported through
`lost` (counted as skipped by the caller), and a fresh worker takes its place. (pebble does
this too, but is not a dependency; the supervisor below is ~100 lines of the standard library.)
When the stage is stopped (Ctrl-C, SIGTERM), every worker is stopped before the stage exits:
no orphan process keeps running, and their `finally` blocks (temporary folders) run.

Time is not enough: a 19.9 MB kern file took music21 to 7.6 GB within its 120 s (issue 35),
and one worker runs per core. With `memory_limit_mb`, each worker may add that much address
space to what it held when it started (Linux: RLIMIT_AS, set in the worker after the fork);
an item past it gets a MemoryError, which the worker reports as `lost` ("out_of_memory")
before it exits, and a fresh worker takes its place. A worker's resident memory is then at
most its size at the fork plus the limit (music21's parse grows both alike), so the pool's
is bounded by workers x that, whatever the input.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)

OUT_OF_MEMORY = "out_of_memory"  # the `lost` reason of an item past `memory_limit_mb`
_MB = 1 << 20

_STOP_GRACE_S = 2.0  # a worker asked to stop (SIGTERM) is killed (SIGKILL) after this
_PARENT_CHECK_S = 1.0  # an idle worker checks this often that the stage is still alive
_SIGNAL_CHECK_S = 0.5  # the supervisor's longest wait, so a stop request is acted on


class WorkerLost(RuntimeError):
    """A worker died (or ran past its time limit) and the caller gave no `lost` fallback."""


class RemoteError(RuntimeError):
    """The traceback of an exception raised in a worker (the cause of the re-raised one)."""


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


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises SystemExit(143) instead of ending the process at once,
    so `finally` blocks run: workers are stopped, staged output folders removed. Only the main
    thread may set signal handlers; elsewhere the block does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def pool_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    label: str,
    *,
    time_limit_s: float | None = None,
    memory_limit_mb: float | None = None,
    lost: Callable[[T, str], R] | None = None,
) -> Iterable[R]:
    """Map in a pool of processes (in order) with a progress bar.

    In-process when workers == 1 and there is no limit (a limit needs a process of its own).

    Args:
        time_limit_s: an item still running after this many seconds has its worker killed.
        memory_limit_mb: address space a worker may add to its size at start (RLIMIT_AS,
            Linux; elsewhere a warning says it is not enforced).
        lost: the result for an item whose worker was killed for time ("timeout"), ran past
            the memory limit ("out_of_memory") or died ("worker_died", e.g. killed by the
            system for memory, a crash); None raises WorkerLost instead.
    """
    if memory_limit_mb is not None and not _can_limit_memory():
        log.warning(
            "%s: no memory limit per worker on %s (RLIMIT_AS is enforced on Linux only)",
            label,
            sys.platform,
        )
        memory_limit_mb = None
    limits = _Limits(time_limit_s, memory_limit_mb)
    with progress() as bar:
        task = bar.add_task(label, total=len(items))
        if workers == 1 and limits == _Limits():
            for item in items:
                yield fn(item)
                bar.advance(task)
            return
        with sigterm_raises():
            for res in _supervise(fn, items, max(1, workers), limits, lost):
                yield res
                bar.advance(task)


@dataclass(frozen=True)
class _Limits:
    time_s: float | None = None
    memory_mb: float | None = None


def _can_limit_memory() -> bool:
    return sys.platform == "linux"


def _address_space(pid: int | str = "self") -> int:
    """A process's address space, bytes (Linux's /proc/<pid>/statm: pages, first field)."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _soft_address_limit(pid: int | str = "self") -> int | None:
    """A process's soft RLIMIT_AS in bytes (Linux's /proc/<pid>/limits); None: unlimited."""
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        for line in f:
            if line.startswith("Max address space"):
                soft = line[len("Max address space") :].split()[0]
                return None if soft == "unlimited" else int(soft)
    return None


_allowance: int | None = None  # in a worker under `_limit_memory`: the bytes it may add


def _limit_memory(memory_mb: float | None) -> None:
    """In a worker: let it grow by `memory_mb` of address space past its size now (what the
    fork gave it: the stage's imports), never past the hard limit it inherited."""
    global _allowance
    if memory_mb is None:
        return
    import resource

    _allowance = int(memory_mb * _MB)

    size = _address_space()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = size + int(memory_mb * _MB)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def near_memory_limit(
    margin: float = 0.1, pid: int | str = "self", allowance: int | None = None
) -> bool:
    """Whether a process's address space (this one's, or a worker's by `pid`) is within
    `margin` of its soft RLIMIT_AS (a worker under `_limit_memory`); False with no limit, or
    when the process is gone. The margin is a fraction of what the worker may add past its
    size at start (`allowance`, bytes; in a worker, its own), else of the whole limit: a
    worker forked from a large process (the test suite's: several GB of address space) may
    add 200 MB, and a tenth of the whole would call it near before it grew at all.

    An allocation refused by the limit does not always surface as MemoryError: a C
    extension's own error or a thread that cannot get its stack raise something else (a
    fresh clone's test saw a parse past parse_memory_mb counted unparsable on a loaded
    machine), and code that catches every Exception may go on failing to allocate until its
    time limit (the same test, in the whole suite beside the main command, saw it counted a
    timeout after 600 s). An error raised, or a worker stopped, this close to the limit is
    one of those."""
    if not _can_limit_memory():
        return False
    if allowance is None and pid == "self":
        allowance = _allowance
    try:
        soft = _soft_address_limit(pid)
        if soft is None:
            return False
        return _address_space(pid) >= soft - margin * (allowance or soft)
    except (OSError, ValueError):  # the process ended meanwhile
        return False


@dataclass
class _Worker(Generic[T]):
    process: Any  # multiprocessing's fork-context Process
    conn: Connection
    job: tuple[int, T] | None = None
    deadline: float = field(default=float("inf"))
    allowance: int | None = None  # bytes it may add past its size at start (memory_limit_mb)

    def stop(self) -> None:
        """SIGTERM (the worker's handler runs its `finally` blocks), then SIGKILL."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(_STOP_GRACE_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _start(fn: Callable[[T], R], memory_mb: float | None) -> _Worker[T]:
    ctx = multiprocessing.get_context("fork")  # workers inherit the imported modules
    parent_end, child_end = ctx.Pipe()
    process = ctx.Process(target=_work, args=(child_end, fn, os.getpid(), memory_mb), daemon=True)
    process.start()
    child_end.close()
    return _Worker(
        process, parent_end, allowance=None if memory_mb is None else int(memory_mb * _MB)
    )


def _work(conn: Connection, fn: Callable[[Any], Any], parent: int, memory_mb: float | None) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers, so they ignore it
    # (else each prints a traceback). SIGTERM raises, so that `finally` blocks run.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _term_with_parent()
    _limit_memory(memory_mb)
    while True:
        if not conn.poll(_PARENT_CHECK_S):
            if os.getppid() != parent:  # the stage was killed outright (SIGKILL): stop too
                return
            continue
        job = conn.recv()
        if job is None:
            return
        try:
            _answer(conn, fn, job)
        except MemoryError:
            pass  # out of the handler, the item's frames (and their memory) are freed
        else:
            continue
        # Past the limit: said once the memory is back, then this worker, whose heap may be
        # in any state, is replaced.
        conn.send(("lost", OUT_OF_MEMORY))
        return


def _answer(conn: Connection, fn: Callable[[Any], Any], job: Any) -> None:
    """Send fn(job), or the exception it raised; a MemoryError is the caller's."""
    try:
        conn.send(("ok", fn(job)))
    except MemoryError:
        raise
    except Exception as exc:
        remote = traceback.format_exc()
        try:
            conn.send(("error", exc, remote))
        except Exception:  # the exception itself does not pickle: send its text
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}"), remote))


def worker_signals() -> None:
    """For a worker process of another pool (the constrained search's): Ctrl-C is left to the
    parent, which stops it, and the kernel stops it when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _term_with_parent()


def _term_with_parent() -> None:
    """Linux: have the kernel send this worker SIGTERM when the stage dies, even by SIGKILL and
    in the middle of an item (the idle check below cannot see that). There is no Python API
    for prctl(PR_SET_PDEATHSIG); elsewhere the idle check is the only guard."""
    import ctypes
    import ctypes.util

    if os.uname().sysname != "Linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _supervise(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    limits: _Limits,
    lost: Callable[[T, str], R] | None,
) -> Iterator[R]:
    pending = deque(enumerate(items))
    done: dict[int, R] = {}
    pool: list[_Worker[T]] = []
    next_out = 0
    try:
        pool = [_start(fn, limits.memory_mb) for _ in range(min(workers, len(items)))]
        while next_out < len(items):
            for w in pool:
                if w.job is None and pending:
                    w.job = pending.popleft()
                    w.deadline = time.monotonic() + (limits.time_s or float("inf"))
                    w.conn.send(w.job[1])
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1
            busy = [w for w in pool if w.job is not None]
            if not busy:
                continue
            nearest = min(w.deadline for w in busy)  # inf: no time limit
            # Never block longer than _SIGNAL_CHECK_S: a Ctrl-C the kernel hands to another
            # thread (rich's refresh thread) only sets Python's flag, and the main thread runs
            # the handler (KeyboardInterrupt) once its wait returns. Unbounded, the stage sat
            # out a whole time limit after Ctrl-C (tests/hostile/test_data_stage.py).
            timeout = min(_SIGNAL_CHECK_S, max(0.0, nearest - time.monotonic()))
            wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout)
            for k, w in enumerate(pool):
                outcome = _collect(w, lost)
                if outcome is None:
                    continue
                index, result, replace = outcome
                done[index] = result
                if replace:
                    w.stop()
                    pool[k] = _start(fn, limits.memory_mb)
    finally:
        for w in pool:
            with contextlib.suppress(OSError):
                if w.job is None and w.process.is_alive():
                    w.conn.send(None)  # idle: let it return on its own
            w.stop()


def _collect(w: _Worker[T], lost: Callable[[T, str], R] | None) -> tuple[int, R, bool] | None:
    """The busy worker's result if it has one: (index, result, whether to replace it)."""
    if w.job is None:
        return None
    index, item = w.job
    reason = None
    if w.conn.poll():
        try:
            message = w.conn.recv()
        except (EOFError, OSError):  # died while sending
            reason = "worker_died"
        else:
            if message[0] == "lost":  # the worker says why, then exits
                reason = message[1]
            else:
                w.job = None
                if message[0] == "error":
                    raise message[1] from RemoteError(message[2])
                return index, message[1], False
    elif not w.process.is_alive():
        reason = "worker_died"
    elif time.monotonic() >= w.deadline:
        # stopped at its memory ceiling, it is too large, not slow (near_memory_limit)
        near = near_memory_limit(pid=w.process.pid, allowance=w.allowance)
        reason = OUT_OF_MEMORY if near else "timeout"
    if reason is None:
        return None
    w.job = None
    if lost is None:
        what = {"timeout": "ran past its time limit", OUT_OF_MEMORY: "ran past its memory limit"}
        raise WorkerLost(f"a worker {what.get(reason, 'died')}")
    return index, lost(item, reason), True


def batched(items: Sequence[T], n: int) -> list[Sequence[T]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


def slices(n: int, size: int) -> Iterator[slice]:
    """Slices of `size` items (the last one shorter) over a sequence of `n`: batches to decode."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))
