"""The service's peak memory and answer for each hostile upload, with the limits of params.yaml.

    python -m benchmarks.hostile_uploads [--score-model DIR] [--speech-model DIR] [--params FILE]

Starts `sonfolio serve` in a subprocess on a free loopback port with the given models (default:
the pipeline's exported models, as `sonfolio serve` picks them: params.yaml `infer.variant`
under each track's export path), posts each case below, and records the HTTP status, the
seconds it took and the server process's peak resident memory during the case (its VmHWM,
reset before each case through /proc/<pid>/clear_refs where Linux allows it, and psutil's RSS
sampled every 5 ms, whichever is higher). Writes benchmarks/results/hostile_uploads.json and
prints a table. The target: under 1 GB for every upload the limits admit.

The cases: a PNG over infer.image.max_pixels (a few KB that would decode to gigabytes), the
largest page the limits admit read as a tilted page (straightened, then cut), a 16-bit TIFF,
an animated GIF, a long silent FLAC (a few hundred KB), a WAV whose header lies about its rate
and length, the longest audio admitted, N large-but-allowed pages in parallel, and a client that
sends its body a byte at a time. The uploads are made here, in memory.
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import soundfile
from PIL import Image, ImageDraw
from rich.table import Table

from benchmarks import console
from sonfolio import cpu
from sonfolio.config.params import load_params
from sonfolio.io import write_json

RESULTS = Path("benchmarks/results/hostile_uploads.json")
TARGET_MB = 1024
MB = 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    send: Callable[[str], list[tuple[int, str]]]  # base URL -> (status, detail) per request


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


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def tilted_page(pixels: int, angle: float = 1.2) -> bytes:
    """A page of width:height 1:1.41 (A4) holding `pixels` at most: staves across it, turned
    by `angle` degrees (so the service straightens it, the largest copy it makes)."""
    height = int((pixels * 1.414) ** 0.5)
    width = pixels // height
    # The turned copy grows; keep the upload itself so that the turned page fits too.
    scale = 0.96
    width, height = int(width * scale), int(height * scale)
    img = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(img)
    gap = max(4, height // 200)
    for top in range(height // 12, height - 6 * gap, height // 10):
        for line in range(5):
            y = top + line * gap
            draw.line((width // 20, y, width - width // 20, y), fill=0, width=max(1, gap // 5))
    return png(img.rotate(angle, Image.Resampling.BICUBIC, fillcolor=255))


def flac(samples: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, samples, rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def lying_wav() -> bytes:
    """A WAV whose header says 4 GB of 48 kHz stereo data follow and a rate of 2 GHz in a
    second format chunk reader's view; 1 s of real samples actually follow."""
    data = np.zeros(16000, dtype="<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, 2_000_000_000, 4_000_000_000, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", 0xFFFFFFF0)
        + data
    )


def post(base: str, path: str, name: str, data: bytes) -> tuple[int, str]:
    try:
        r = httpx.post(base + path, files={"file": (name, data)}, timeout=600)
    except httpx.HTTPError as err:
        return 0, f"{type(err).__name__}: {err}"
    try:
        detail = r.json().get("detail", "") if r.status_code != 200 else "ok"
    except json.JSONDecodeError:
        detail = r.text[:200]
    return r.status_code, str(detail)


def parallel(base: str, path: str, name: str, data: bytes, n: int) -> list[tuple[int, str]]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: post(base, path, name, data), range(n)))


def slow_body(base: str, seconds: float) -> list[tuple[int, str]]:
    """A multipart upload that sends a byte every 0.5 s: the server's answer, or 0."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=seconds) as sock:
        sock.sendall(
            b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b"
            b"\r\nContent-Length: 100000\r\n\r\n--b\r\n"
        )
        sock.settimeout(0.5)
        start, got = time.monotonic(), b""
        while time.monotonic() - start < seconds:
            try:
                got += sock.recv(65536)
                break
            except TimeoutError:
                try:
                    sock.sendall(b"x")
                except OSError:
                    break
    head = got.split(b"\r\n", 1)[0].decode(errors="replace")
    status = int(head.split()[1]) if head.startswith("HTTP/") else 0
    body = got.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
    return [(status, body[:200] or "closed with no answer")]


def cases(params_path: Path, parallel_n: int) -> list[Case]:
    params = load_params(params_path)
    image, serve = params.infer.image, params.serve
    max_s = getattr(getattr(params.infer, "audio_limits", None), "max_audio_s", 600.0)
    side = int(image.max_pixels**0.5) + 100
    big = png(Image.new("1", (side, side), 1))
    allowed = tilted_page(image.max_pixels)
    deep = np.full((1500, 2000), 60000, dtype=np.uint16)
    for top in range(200, 1400, 250):
        deep[top : top + 60 : 12, 100:-100] = 2000  # five lines a staff, dark in 16 bits
    tiff = io.BytesIO()
    Image.fromarray(deep).save(tiff, format="TIFF")
    frames = [Image.new("L", (400, 300), shade) for shade in (0, 128, 255)]
    gif = io.BytesIO()
    frames[0].save(gif, format="GIF", save_all=True, append_images=frames[1:])
    silent = flac(np.zeros(int(3600 * 16000), dtype=np.int16), 16000)  # an hour of silence
    t = np.arange(int((max_s - 10) * 16000)) / 16000
    tone = flac((0.1 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16), 16000)
    slow_s = serve.body_timeout_s + 30
    return [
        Case("huge_pixel_png", f"{side}x{side} blank PNG, {kb(big)}", one("/read", "h.png", big)),
        Case(
            "largest_allowed_page",
            f"{image.max_pixels / 1e6:.0f} MP tilted page, {kb(allowed)}",
            one("/read?page=true", "page.png", allowed),
        ),
        Case("tiff_16_bit", "2000x1500 16-bit TIFF", one("/read", "scan.tif", tiff.getvalue())),
        Case("animated_gif", "3 frames", one("/read", "anim.gif", gif.getvalue())),
        Case(
            "long_silent_flac",
            f"1 h of silence, {kb(silent)}",
            one("/transcribe", "silence.flac", silent),
        ),
        Case(
            "lying_wav_header",
            "header: 2 GHz, 4 GB of data; 1 s follows",
            one("/transcribe", "lie.wav", lying_wav()),
        ),
        Case(
            "longest_allowed_audio",
            f"{max_s - 10:.0f} s tone FLAC, {kb(tone)}",
            one("/transcribe", "long.flac", tone),
        ),
        Case(
            f"parallel_{parallel_n}_pages",
            f"{parallel_n} x the largest allowed page at once",
            lambda b: parallel(b, "/read?page=true", "page.png", allowed, parallel_n),
        ),
        Case(
            "slow_body",
            f"a byte every 0.5 s (serve.body_timeout_s {serve.body_timeout_s:g})",
            lambda b: slow_body(b, slow_s),
        ),
    ]


def kb(data: bytes) -> str:
    return f"{len(data) // 1024:,} KB"


def one(path: str, name: str, data: bytes) -> Callable[[str], list[tuple[int, str]]]:
    return lambda base: [post(base, path, name, data)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: argparse.Namespace, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sonfolio.cli", "serve", "--port", str(port)]
    cmd += ["--params", str(args.params), "--threads", str(args.threads), "--device", "cpu"]
    for flag, folder in (
        ("--score-model", args.score_model),
        ("--speech-model", args.speech_model),
    ):
        if folder is not None:
            cmd += [flag, str(folder)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the service did not start:\n{server.stderr.read().decode()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.5)
    server.kill()
    sys.exit("the service did not answer /health within 300 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--score-model", type=Path, help="default: as `sonfolio serve`")
    parser.add_argument("--speech-model", type=Path, help="default: as `sonfolio serve`")
    parser.add_argument("--threads", type=int, default=2, help="the service's CPU threads")
    parser.add_argument("--parallel", type=int, default=4, help="pages posted at once")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    todo = cases(args.params, args.parallel)
    load_before = cpu.load_average()
    port = free_port()
    server = start_server(args, port)
    base, rows = f"http://127.0.0.1:{port}", []
    try:
        baseline = Memory(server.pid)._rss()
        for case in todo:
            start = time.perf_counter()
            with Memory(server.pid) as memory:
                replies = case.send(base)
            admitted = any(status == 200 for status, _ in replies)
            rows.append(
                {
                    "case": case.name,
                    "upload": case.what,
                    "statuses": [status for status, _ in replies],
                    "detail": replies[0][1][:300],
                    "seconds": round(time.perf_counter() - start, 2),
                    "peak_rss_mb": round(memory.peak),
                    "admitted": admitted,
                    "within_target": memory.peak < TARGET_MB,
                    "server_alive": server.poll() is None,
                }
            )
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
        "idle_rss_mb": round(baseline),
        "target_mb": TARGET_MB,
        **cpu.run_conditions(load_before),
        "cases": rows,
    }
    write_json(args.out, result)
    table = Table(
        title=f"hostile uploads (idle server: {baseline:.0f} MB; target < {TARGET_MB} MB)"
    )
    for column in ("case", "upload", "statuses", "s", "peak MB", "detail"):
        table.add_column(column, overflow="fold")
    for row in rows:
        peak = f"{row['peak_rss_mb']}" + ("" if row["within_target"] else " (over)")
        table.add_row(
            row["case"], row["upload"], str(row["statuses"]), f"{row['seconds']}", peak,
            row["detail"][:120],
        )  # fmt: skip
    console().print(table)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
