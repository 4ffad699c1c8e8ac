"""The service's peak memory, answers and times for each hostile upload and client, with the
limits of params.yaml.

    python -m benchmarks.hostile_uploads [--score-model DIR] [--speech-model DIR] [--params FILE]

Starts `sonfolio serve` in a subprocess on a free loopback port with the given models (default:
the pipeline's exported models, as `sonfolio serve` picks them: params.yaml `infer.variant`
under each track's export path), posts each case below, and records the HTTP status, the
seconds it took and the server process's peak resident memory during the case (its VmHWM,
reset before each case through /proc/<pid>/clear_refs where Linux allows it, and psutil's RSS
sampled every 5 ms, whichever is higher). Writes benchmarks/results/hostile_uploads.json and
prints a table. The targets: under 1 GB for every upload the limits admit, throughout; every
small request sent beside a hostile one answered in under 10 s; /health answered 200 on every
check while one client holds 70 slow sockets.

The cases: a PNG over infer.score.image.max_pixels (a few KB that would decode to gigabytes), the
largest page the limits admit read as a tilted page (straightened, then cut), a 16-bit TIFF,
an animated GIF, a long silent FLAC (a few hundred KB), a WAV whose header lies about its rate
and length, the longest audio admitted, N large-but-allowed pages in parallel, a client that
sends its body a byte at a time; a page of 29 staves in 39.6 M pixels (a 56 KB PNG) and 599 s
of 8-channel 192 kHz FLAC, each with four small requests (two one-staff images, two spoken
clips) sent a second after it; and 70 slow sockets from one client (127.0.0.2: another address
of this machine), half trickling their headers and half a body, reopened when cut, for 40 s of
/health checks (every 2 s, from 127.0.0.1) and one real upload. The uploads are made in memory
(benchmarks/hostile_cases.py: each case's upload and the client that sends it).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from rich.table import Table

from benchmarks import console
from benchmarks.hostile_cases import Case, Reply, cases, one_staff, post, spoken
from sonfolio import cpu
from sonfolio.config.params import load_params
from sonfolio.io import write_json

RESULTS = Path("benchmarks/results/hostile_uploads.json")
TARGET_MB = 1024
SMALL_TARGET_S = 10.0  # a small request beside a hostile one is answered within this
MB = 1024 * 1024


class Memory:
    """The server's peak RSS in MB over a span: VmHWM reset at the start where allowed, and
    RSS sampled in a thread (psutil if installed, else /proc/<pid>/status)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread: threading.Thread | None = None

    def _status_mb(self, key: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
        return 0.0

    def _rss(self) -> float:
        try:
            import psutil

            return psutil.Process(self.pid).memory_info().rss / MB
        except ImportError:
            return self._status_mb("VmRSS")

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(0.005)

    def __enter__(self) -> Memory:
        try:  # "5": reset the peak resident set size (proc(5), Linux >= 4.0)
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self.peak, self._stop = self._rss(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        if self.hwm_reset:
            self.peak = max(self.peak, self._status_mb("VmHWM"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: argparse.Namespace, port: int, log: Path) -> subprocess.Popen:
    """`sonfolio serve` on `port`, its log in `log` (a pipe would fill and stop the server:
    a slow client makes it log a line per cut or refused connection)."""
    cmd = [sys.executable, "-m", "sonfolio.cli", "serve", "--port", str(port)]
    cmd += ["--params", str(args.params), "--threads", str(args.threads), "--device", "cpu"]
    for flag, folder in (
        ("--score-model", args.score_model),
        ("--speech-model", args.speech_model),
    ):
        if folder is not None:
            cmd += [flag, str(folder)]
    with log.open("wb") as out:
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=out)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the service did not start:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.5)
    server.kill()
    sys.exit("the service did not answer /health within 300 s")


def warm_up(base: str) -> None:
    """One staff and one clip, untimed: a model's first call builds what later calls reuse
    (the grammar's tables: ~7 s on a busy 2-core machine), which no case should be charged."""
    for path, name, data in (
        ("/read", "staff.png", one_staff()),
        ("/transcribe", "c.wav", spoken()),
    ):
        reply = post(base, path, name, data)
        if reply.status != 200:
            sys.exit(f"the warm-up {path} failed: {reply.status} {reply.detail}")


def checks(replies: list[Reply]) -> dict:
    """The case's targets beside memory: the small requests' times, /health's answers."""
    out: dict = {}
    smalls = [r for r in replies if r.part == "small"]
    if smalls:
        out["small_seconds"] = [round(r.seconds, 2) for r in smalls]
        out["smalls_within_target"] = all(
            r.status == 200 and r.seconds < SMALL_TARGET_S for r in smalls
        )
    health = [r for r in replies if r.part == "health"]
    if health:
        out["health_statuses"] = [r.status for r in health]
        out["health_max_seconds"] = round(max(r.seconds for r in health), 2)
        out["health_all_200"] = all(r.status == 200 for r in health)
        out["real_upload"] = [r.status for r in replies if r.part == "real"]
    return out


def summary(row: dict) -> str:
    if "small_seconds" in row:
        ok = "ok" if row["smalls_within_target"] else "MISSED"
        return f"smalls {max(row['small_seconds'])} s at most ({ok}, < {SMALL_TARGET_S:g} s)"
    if "health_statuses" in row:
        ok = sum(s == 200 for s in row["health_statuses"])
        return f"/health 200 on {ok}/{len(row['health_statuses'])}; upload {row['real_upload']}"
    return ""


def measure(case: Case, base: str, server: subprocess.Popen) -> dict:
    start = time.perf_counter()
    with Memory(server.pid) as memory:
        replies = case.send(base)
    answered = [r for r in replies if r.part != "slow"]
    return {
        "case": case.name,
        "upload": case.what,
        "statuses": [r.status for r in answered],
        "detail": replies[0].detail[:300],
        "seconds": round(time.perf_counter() - start, 2),
        "first_seconds": round(replies[0].seconds, 2),
        "peak_rss_mb": round(memory.peak),
        "admitted": any(r.status == 200 for r in answered),
        "within_target": memory.peak < TARGET_MB,
        "server_alive": server.poll() is None,
        **checks(replies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--score-model", type=Path, help="default: as `sonfolio serve`")
    parser.add_argument("--speech-model", type=Path, help="default: as `sonfolio serve`")
    parser.add_argument("--threads", type=int, default=2, help="the service's CPU threads")
    parser.add_argument("--parallel", type=int, default=4, help="pages posted at once")
    parser.add_argument("--only", nargs="*", help="run only these cases (default: every one)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    todo = [c for c in cases(args.params, args.parallel) if not args.only or c.name in args.only]
    load_before = cpu.load_average()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(args, port, Path(tmp) / "server.log")
        base, rows = f"http://127.0.0.1:{port}", []
        try:
            baseline = Memory(server.pid)._rss()
            warm_up(base)
            warm = Memory(server.pid)._rss()
            for case in todo:
                rows.append(measure(case, base, server))
                if server.poll() is not None:
                    break
        finally:
            server.terminate()
            server.wait(timeout=30)
    served = {}
    for track, given in (("score", args.score_model), ("speech", args.speech_model)):
        if given is None:  # as `sonfolio serve` picks it
            from sonfolio.infer.run import default_model

            params = load_params(args.params)
            given, _ = default_model(track, params.paths, params.infer.variant)
        served[track] = str(given)
    result = {
        "models": served,
        "params": str(args.params),
        "threads": args.threads,
        "idle_rss_mb": round(baseline),
        "warm_rss_mb": round(warm),
        "target_mb": TARGET_MB,
        "peak_rss_mb": max(row["peak_rss_mb"] for row in rows),
        "small_target_s": SMALL_TARGET_S,
        **cpu.run_conditions(load_before),
        "cases": rows,
    }
    write_json(args.out, result)
    table = Table(
        title=f"hostile uploads (idle server: {baseline:.0f} MB, {warm:.0f} MB once each model "
        f"has read; target < {TARGET_MB} MB)"
    )
    for column in ("case", "upload", "statuses", "s", "peak MB", "checks", "detail"):
        table.add_column(column, overflow="fold")
    for row in rows:
        peak = f"{row['peak_rss_mb']}" + ("" if row["within_target"] else " (over)")
        table.add_row(
            row["case"], row["upload"], str(row["statuses"]), f"{row['seconds']}", peak,
            summary(row), row["detail"][:120],
        )  # fmt: skip
    console().print(table)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
