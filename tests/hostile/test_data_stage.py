"""The data stage on hostile or careless corpora (issues 19, 35): files too big, too slow or too
hungry to parse are skipped and counted with their reason (the stage's memory bounded), names
that are not UTF-8 are named, a corpus too small for its splits fails saying what to change,
and a stopped stage leaves no worker and no half-written folder behind. Every input is made
here, in tmp_path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

import sonfolio.score.data.dataset as dataset
from sonfolio import tracks
from sonfolio.config.data import ScoreData, ScoreSource
from sonfolio.io import write_jsonl
from sonfolio.score.data.dataset import EmptySplit, TooManySkipped, check_skips, parse_units
from sonfolio.score.data.parse import too_large
from sonfolio.score.data.sources import list_units, music21_corpus_root
from sonfolio.speech.data.clips import Utterance
from sonfolio.speech.data.dataset import check_splits as check_speech_splits
from tasks.data import run

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20


def chorales(n: int) -> list[Path]:
    return sorted((music21_corpus_root() / "bach").glob("bwv1*.mxl"))[:n]


def own(cfg: ScoreData, folder: Path, **update) -> ScoreData:
    """score_data with `folder` its one source (no held-out collection) and two workers."""
    split = cfg.split.model_copy(update={"heldout_collections": []})
    source = ScoreSource(name="mine", folder=folder)
    return cfg.model_copy(update={"sources": [source], "split": split, "workers": 2, **update})


def test_files_over_the_size_cap_are_skipped_unread_and_counted(params, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(chorales(1)[0], folder / "good.mxl")
    limits = params.score_data.limits
    # Kern and ABC cost music21 1-3 KB of memory a byte (MusicXML far less), so their caps are
    # their own, and lower (issue 35: a 19.9 MB kern file under the 20 MB cap took 7.6 GB).
    # A kern file and an ABC file of many tunes, each just past its cap: listing must not
    # split the ABC into tunes (that reads it whole), parsing must not open either.
    kern_cap, abc_cap = limits.max_kern_mb, limits.max_abc_mb
    assert kern_cap < limits.max_file_mb and abc_cap < limits.max_file_mb
    (folder / "big.krn").write_bytes(b"**kern\n" + b"4c\n" * int(kern_cap * MB / 3 + 1))
    (folder / "big.abc").write_bytes(b"X:1\nK:C\nC|\n" * int(abc_cap * MB / 11 + 1))
    cfg = own(params.score_data, folder)
    units = list_units(cfg.sources[0], tmp_path / "cache", 0, cfg.limits)
    assert sorted(u.piece for u in units) == ["mine/big.abc", "mine/big.krn", "mine/good.mxl"]
    parsed = {p.unit.piece: p for p in parse_units(units, cfg)}
    assert parsed["mine/big.krn"].skip_reason == "too_large"
    assert parsed["mine/big.abc"].skip_reason == "too_large"
    assert parsed["mine/good.mxl"].skip_reason is None and parsed["mine/good.mxl"].systems
    assert check_skips(list(parsed.values()), 1.0) == {"too_large": 2}
    assert f"score_data.limits.max_kern_mb is {kern_cap:g}: raise it" in str(
        too_large(folder / "big.krn", limits)
    )
    assert f"score_data.limits.max_abc_mb is {abc_cap:g}: raise it" in str(
        too_large(folder / "big.abc", limits)
    )


def plain_measures(path: Path, mb: float) -> Path:
    """A kern file of `mb` MB of plain 4/4 measures: what music21 grows on fastest."""
    bar = b"4c\n4d\n4e\n4f\n=\n"
    path.write_bytes(b"**kern\n*M4/4\n" + bar * int(mb * MB / len(bar)) + b"*-\n")
    return path


def test_a_piece_over_the_memory_limit_is_skipped_naming_the_param_and_the_rest_parse(
    params, tmp_path, caplog
):
    """Time alone does not bound memory (a 19.9 MB kern file reached 7.6 GB within 120 s):
    a parse past score_data.limits.parse_memory_mb is stopped in its worker, counted
    too_large, and a fresh worker parses the rest."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for path in chorales(2):
        shutil.copy(path, folder / path.name)
    plain_measures(folder / "big.krn", 1.0)  # under the raised size cap: only memory stops it
    # and its time limit far: on a busy machine (the suite and a benchmark on 2 cores) the
    # parse once ran past 120 s, the default limit, and was counted a timeout; quiet, it
    # reaches 200 MB in seconds
    limits = params.score_data.limits.model_copy(
        update={"max_kern_mb": 20.0, "parse_memory_mb": 200.0, "parse_timeout_s": 600.0}
    )
    cfg = own(params.score_data, folder, limits=limits)
    units = list_units(cfg.sources[0], tmp_path / "cache", 0, cfg.limits)
    parsed = parse_units(units, cfg)
    reasons = {p.unit.path.name: p.skip_reason for p in parsed}
    assert reasons == {"big.krn": "too_large", **{path.name: None for path in chorales(2)}}
    assert all(p.systems for p in parsed if p.skip_reason is None)
    assert (
        "skipping mine/big.krn (too_large): parsing it needed more than 200 MB "
        "(score_data.limits.parse_memory_mb: raise it in params.yaml"
    ) in caplog.text
    assert psutil.Process().children() == []  # the pool left no worker behind


STAGE_ON_HUGE_KERN = """
import json, sys
from pathlib import Path

from sonfolio import tracks
from sonfolio.config.data import ScoreSource
from sonfolio.config.params import load_params
from tasks.data import run

root, tmp, limits = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
cfg = load_params(root / "params.yaml").score_data
split = cfg.split.model_copy(update={"heldout_collections": [], "val": 0.3, "test": 0.0})
cfg = cfg.model_copy(update={
    "sources": [ScoreSource(name="mine", folder=tmp / "mine")], "split": split, "workers": 2,
    "limits": cfg.limits.model_copy(update=limits), "max_skip_fraction": 0.5,
    "pages": cfg.pages.model_copy(update={"fraction": 0.0}),
})
run(cfg, tracks.face("score", "data"), tmp / "cache", tmp / "out", tmp / "stats.json")
"""


class TreeMemory:
    """The peak proportional memory (PSS: a page shared by n processes counts 1/n in each) of a
    process and its descendants, sampled every 0.1 s; past `ceiling` the tree is killed."""

    def __init__(self, pid: int, ceiling: int) -> None:
        self.root, self.ceiling = psutil.Process(pid), ceiling
        self.peak, self.killed = 0, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            try:
                tree = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            total = 0
            for proc in tree:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_full_info().pss
            self.peak = max(self.peak, total)
            if total > self.ceiling:
                self.killed = True
                for proc in reversed(tree):
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize(
    "limits",
    [{}, {"max_kern_mb": 20.0, "parse_memory_mb": 300.0}],
    ids=["default caps", "size cap raised, memory limit"],
)
def test_the_data_stage_ends_on_a_huge_kern_file_in_bounded_memory(tmp_path, limits):
    """Issue 35: a 19.9 MB kern file of plain measures (under the old 20 MB cap) took music21
    to 7.6 GB in 94 s, one such parse per core. With the default caps it is skipped unread;
    with its size cap raised, the memory limit stops its parse. Either way the stage ends,
    the file counted too_large, the whole stage (every worker) under 3 GB."""
    (tmp_path / "mine").mkdir()
    plain_measures(tmp_path / "mine" / "big.krn", 19.9)
    for path in chorales(2):
        shutil.copy(path, tmp_path / "mine" / path.name)
    script = tmp_path / "stage.py"
    script.write_text(textwrap.dedent(STAGE_ON_HUGE_KERN))
    log = tmp_path / "stage.log"
    with log.open("wb") as err:  # a file, not a pipe: a full pipe would block the stage
        stage = subprocess.Popen(
            [sys.executable, str(script), str(ROOT), str(tmp_path), json.dumps(limits)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    memory = TreeMemory(stage.pid, ceiling=3 << 30)
    try:
        code = stage.wait(900)
    finally:
        memory.stop()
        if stage.poll() is None:
            stage.kill()
    said = log.read_text(errors="replace")
    assert not memory.killed, f"the stage passed 3 GB:\n{said[-3000:]}"
    assert code == 0, said[-3000:]
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["skipped_pieces"] == {"too_large": 1}
    assert stats["systems"]["train"] and stats["systems"]["val"]
    assert "skipped mine/big.krn: too_large" in said
    if limits:
        assert "(score_data.limits.parse_memory_mb: raise it in params.yaml" in said
    assert memory.peak < 3 << 30


def _stall_or_die(path: Path, **kwargs):
    """Stands in for the parser in the workers (forked: they inherit the monkeypatch)."""
    if path.stem == "slow":
        (path.parent / f"pid-{os.getpid()}").touch()
        time.sleep(600)  # a piece music21 would never finish
    if path.stem == "crash":
        os._exit(9)  # a worker killed under it (the kernel's OOM killer, a segfault)
    return _REAL_PARSE(path, **kwargs)


_REAL_PARSE = dataset.pieces_from_file


def test_a_piece_over_the_time_limit_is_killed_and_counted_and_the_rest_parse(
    params, tmp_path, monkeypatch
):
    folder = tmp_path / "mine"
    folder.mkdir()
    for path in chorales(2):
        shutil.copy(path, folder / path.name)
    (folder / "slow.krn").write_text("**kern\n")
    (folder / "crash.krn").write_text("**kern\n")
    monkeypatch.setattr(dataset, "pieces_from_file", _stall_or_die)
    # 20 s: a chorale parses in ~0.3 s on a quiet machine, but took over 2 s (the limit this
    # test had) with the main command and an eval on the same 2 cores; the stalled piece
    # sleeps 600 s, so it is still the one killed
    limits = params.score_data.limits.model_copy(update={"parse_timeout_s": 20.0})
    cfg = own(params.score_data, folder, limits=limits)
    units = list_units(cfg.sources[0], tmp_path / "cache", 0, cfg.limits)
    start = time.monotonic()
    parsed = parse_units(units, cfg)
    assert time.monotonic() - start < 300  # the limit, not the stalled piece's 600 s
    reasons = {p.unit.path.name: p.skip_reason for p in parsed}
    assert reasons == {
        "crash.krn": "worker_died",
        "slow.krn": "timeout",
        **{path.name: None for path in chorales(2)},
    }
    assert all(p.systems for p in parsed if p.skip_reason is None)
    [pid] = [int(p.name.removeprefix("pid-")) for p in folder.glob("pid-*")]
    assert not psutil.pid_exists(pid), "the worker over the time limit still runs"
    assert psutil.Process().children() == []  # the pool left no worker behind


def test_file_names_that_are_not_utf8_are_read_and_named(params, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    good = folder / os.fsdecode(b"chor\xe9.mxl")  # Latin-1 bytes: not UTF-8
    shutil.copy(chorales(1)[0], good)
    (folder / os.fsdecode(b"bad\xff.xml")).write_text("<score-partwise><part id='P1'><measure")
    cfg = own(params.score_data, folder)
    units = list_units(cfg.sources[0], tmp_path / "cache", 0, cfg.limits)
    assert sorted(u.piece for u in units) == ["mine/bad\\xff.xml", "mine/chor\\xe9.mxl"]
    parsed = parse_units(units, cfg)
    ok = next(p for p in parsed if p.unit.path == good)
    assert ok.systems and ok.skip_reason is None
    # The piece ids reach the manifest: written as UTF-8 JSON without an error.
    write_jsonl(tmp_path / "m.jsonl", [{"piece": s.piece} for s in ok.systems])
    assert "chor\\\\xe9.mxl" in (tmp_path / "m.jsonl").read_text(encoding="utf-8")
    with pytest.raises(TooManySkipped) as err:
        check_skips(parsed, 0.0)
    assert "bad\\xff.xml" in str(err.value) and "unparsable" in str(err.value)


def test_a_corpus_too_small_for_its_splits_fails_saying_what_to_change(params, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(chorales(1)[0], folder / "only.mxl")
    cfg = own(params.score_data, folder, synthetic_fraction=0.0)
    with pytest.raises(EmptySplit, match=r"1 piece\(s\) give 0 val systems after parsing") as err:
        run(
            cfg,
            tracks.face("score", "data"),
            tmp_path / "cache",
            tmp_path / "out",
            tmp_path / "m.json",
        )
    assert "raise score_data.split.val (now 0.05)" in str(err.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.json").exists()
    assert not list(tmp_path.glob(".out.tmp-*"))


def test_a_speech_corpus_with_no_val_clip_fails_naming_the_keys(params):
    rows = [Utterance(f"a/{i}.wav", "t", "t", 1.0, "fr+m1", "train") for i in range(3)]
    rows.append(Utterance("a/t.wav", "t", "t", 1.0, "fr+m6", "test"))
    with pytest.raises(ValueError, match="0 val clips: raise speech_data.synthetic.utterances"):
        check_speech_splits(rows, params.speech_data)
    check_speech_splits(
        [*rows, Utterance("a/v.wav", "t", "t", 1.0, "fr+m1", "val")], params.speech_data
    )


STAGE = """
import faulthandler, os, signal, sys, time
from pathlib import Path

faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where a stuck stage is

import sonfolio.score.data.dataset as dataset
from sonfolio import tracks
from sonfolio.config.data import ScoreSource
from sonfolio.config.params import load_params
from sonfolio.parallel import sigterm_raises
from tasks.data import run

root, tmp = Path(sys.argv[1]), Path(sys.argv[2])
cfg = load_params(root / "params.yaml").score_data
split = cfg.split.model_copy(update={"heldout_collections": []})
source = ScoreSource(name="mine", folder=tmp / "mine")
cfg = cfg.model_copy(update={"sources": [source], "split": split, "workers": 2})


def stall(path, **kwargs):
    (tmp / f"pid-{os.getpid()}").touch()
    time.sleep(600)


dataset.pieces_from_file = stall
with sigterm_raises():  # as tasks.data.main runs the stage
    run(cfg, tracks.face("score", "data"), tmp / "cache", tmp / "out", tmp / "m.json")
"""


def _terminal_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C", "SIGKILL"])
def test_a_stopped_stage_leaves_no_worker_and_no_staged_folder(tmp_path, how):
    (tmp_path / "mine").mkdir()
    for i in range(4):
        (tmp_path / "mine" / f"p{i}.krn").write_text("**kern\n")
    script = tmp_path / "stage.py"
    script.write_text(textwrap.dedent(STAGE))
    log = tmp_path / "stage.log"
    with log.open("wb") as err:  # a file, not a pipe: a full pipe would block the stage
        stage = subprocess.Popen(
            [sys.executable, str(script), str(ROOT), str(tmp_path)],
            cwd=tmp_path,
            start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches
            # as a terminal starts it: SIGINT handled and unblocked (the full suite's pytest
            # process passes SIGINT on ignored or blocked: in fresh clones the stage never saw
            # the Ctrl-C; which earlier test leaves it so is not found yet)
            preexec_fn=_terminal_signals,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 40
        while len(list(tmp_path.glob("pid-*"))) < 2:
            assert time.monotonic() < deadline and stage.poll() is None, log.read_text()
            time.sleep(0.1)
        assert list(tmp_path.glob(".out.tmp-*")), "the stage should be mid-way"
        if how == "SIGTERM":
            stage.send_signal(signal.SIGTERM)
        elif how == "SIGKILL":  # nothing of the stage runs: its workers must still stop
            stage.kill()
        else:
            os.killpg(stage.pid, signal.SIGINT)
        try:
            assert stage.wait(20) != 0
        except subprocess.TimeoutExpired:
            stage.send_signal(signal.SIGUSR1)  # its threads' stacks, then the failure says where
            time.sleep(1)
            stage.kill()
            pytest.fail(f"the stage did not stop within 20 s of {how}:\n{log.read_text()}")
    finally:
        if stage.poll() is None:
            stage.kill()
    workers = [int(p.name.removeprefix("pid-")) for p in tmp_path.glob("pid-*")]

    def alive() -> list[int]:
        return [
            pid
            for pid in workers
            if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        ]

    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive() == [], f"orphan workers {alive()}"
    assert not (tmp_path / "out").exists()
    if how == "SIGKILL":  # its staged folder stays, until the stage's next run removes it
        from sonfolio.io import staged_dir

        assert list(tmp_path.glob(".out.tmp-*"))
        with staged_dir(tmp_path / "out") as staged:
            (staged / "rows.jsonl").write_text("")
    assert not list(tmp_path.glob(".out.tmp-*"))


def test_an_error_raised_at_the_memory_limit_counts_as_memory_not_unparsable(monkeypatch):
    """Past RLIMIT_AS an allocation can fail under another name (a C extension's error, a
    thread without its stack): a parse that fails that close to the limit is a MemoryError
    (its worker then counts the piece too_large); the same error elsewhere names the file."""
    from sonfolio.score.data import parse

    def fails() -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(parse, "near_memory_limit", lambda **_: True)
    with pytest.raises(MemoryError, match="RuntimeError at the memory limit"):
        parse._parse(Path("mine/big.krn"), fails)
    monkeypatch.setattr(parse, "near_memory_limit", lambda **_: False)
    with pytest.raises(parse.SourceError, match="unparsable"):
        parse._parse(Path("mine/big.krn"), fails)


def _hoard_then_wait(item: str) -> str:
    """In a pool worker: "hoard" takes memory until the limit refuses it and, as code that
    catches every Exception does, goes on waiting at the ceiling; "wait" only waits."""
    held = []
    if item == "hoard":
        with contextlib.suppress(MemoryError):
            while True:
                held.append(bytearray(1 << 20))
    time.sleep(120)  # past the pool's time limit either way
    return item


def test_a_worker_stopped_at_its_memory_ceiling_counts_as_memory_not_time():
    """A worker that reaches its memory limit and is then stopped by the time limit counts
    as memory (the piece too_large, naming parse_memory_mb), one that is only slow as time."""
    from sonfolio.parallel import OUT_OF_MEMORY, pool_map

    reasons = list(
        pool_map(
            _hoard_then_wait,
            ["hoard", "wait"],
            2,
            "test",
            time_limit_s=20,  # the hoard takes ~0.1 s quiet: far, on a busy machine too
            memory_limit_mb=64,
            lost=lambda _item, reason: reason,
        )
    )
    assert reasons == [OUT_OF_MEMORY, "timeout"]


@pytest.mark.parametrize(("room_mb", "near"), [(1, True), (100_000, False)])
def test_near_memory_limit_reads_this_process_limit(room_mb, near):
    """A soft RLIMIT_AS just above the process's size is near; one far above is not."""
    code = (
        "import os, resource\n"
        "from sonfolio.parallel import near_memory_limit\n"
        "size = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
        f"resource.setrlimit(resource.RLIMIT_AS, (size + {room_mb} * 2**20, "
        "resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
        "print(near_memory_limit())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(near)
