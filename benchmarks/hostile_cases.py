"""The cases of benchmarks/hostile_uploads.py: each hostile upload or client, made here in
memory, and how it is sent to the service (one request, several at once, small ones beside a
hostile one, a body a byte at a time, slow sockets held while /health is checked). A case's
`send` takes the service's base URL and returns each request's `Reply`; `cases` builds them all
with the limits of params.yaml.
"""

from __future__ import annotations

import io
import json
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import soundfile
from PIL import Image, ImageDraw

from sonfolio.config.params import load_params
from sonfolio.speech.data.espeak import synthesize


@dataclass(frozen=True)
class Reply:
    """One request's answer: status (0: no answer), detail, seconds from its sending, and its
    part in the case ("", "hostile", "small", "health", "real")."""

    status: int
    detail: str
    seconds: float
    part: str = ""


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    send: Callable[[str], list[Reply]]  # base URL -> each request's reply


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


def post(base: str, path: str, name: str, data: bytes, part: str = "") -> Reply:
    start = time.perf_counter()
    try:
        r = httpx.post(base + path, files={"file": (name, data)}, timeout=600)
    except httpx.HTTPError as err:
        return Reply(0, f"{type(err).__name__}: {err}", time.perf_counter() - start, part)
    took = time.perf_counter() - start
    try:
        detail = r.json().get("detail", "") if r.status_code != 200 else "ok"
    except json.JSONDecodeError:
        detail = r.text[:200]
    return Reply(r.status_code, str(detail), took, part)


def parallel(base: str, path: str, name: str, data: bytes, n: int) -> list[Reply]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: post(base, path, name, data), range(n)))


Upload = tuple[str, str, bytes]  # path, file name, bytes


def beside(base: str, hostile: Upload, smalls: list[Upload]) -> list[Reply]:
    """`hostile` posted, then a second later every one of `smalls` at once."""
    with ThreadPoolExecutor(1 + len(smalls)) as pool:
        first = pool.submit(post, base, *hostile, "hostile")
        time.sleep(1.0)
        rest = [pool.submit(post, base, *small, "small") for small in smalls]
        return [first.result(), *(f.result() for f in rest)]


def slow_body(base: str, seconds: float) -> list[Reply]:
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
    return [Reply(status, body[:200] or "closed with no answer", time.monotonic() - start)]


SLOW_STARTS = (  # a request's headers, trickled; a body, trickled after complete headers
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ",
    b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
    b"Content-Length: 100000\r\n\r\n--b\r\n",
)


class SlowSockets:
    """`n` sockets from `source` held open in one thread, half sending their headers and half
    their body a byte every 0.5 s; one the server cuts or answers is opened again (at most
    `n` every 0.25 s). Counts the sockets opened and the server's answers by status."""

    def __init__(self, host: str, port: int, n: int, source: str) -> None:
        self.address, self.n, self.source = (host, port), n, source
        self.opened, self.answers, self.stop = 0, Counter[int](), threading.Event()
        self.open: dict[socket.socket, int] = {}
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _refill(self) -> None:
        while len(self.open) < self.n:
            try:
                sock = socket.create_connection(self.address, 10, (self.source, 0))
                sock.sendall(SLOW_STARTS[self.opened % 2])
            except OSError:
                return
            self.open[sock], self.opened = self.opened, self.opened + 1

    def _drop(self, sock: socket.socket) -> None:
        self.open.pop(sock, None)
        sock.close()

    def _hold(self) -> None:
        next_byte = refill = time.monotonic()
        while not self.stop.is_set():
            if time.monotonic() >= refill:
                self._refill()
                refill = time.monotonic() + 0.25
            ready, _, _ = select.select(list(self.open), [], [], 0.1)
            for sock in ready:
                try:
                    got = sock.recv(4096)
                except OSError:  # a reset: the server closed it with our bytes unread
                    got = b""
                if got.startswith(b"HTTP/1.1 "):
                    self.answers[int(got.split()[1])] += 1
                self._drop(sock)
            if time.monotonic() >= next_byte:
                for sock in list(self.open):
                    try:
                        sock.send(b"x")
                    except OSError:
                        self._drop(sock)
                next_byte = time.monotonic() + 0.5
        for sock in list(self.open):
            self._drop(sock)


def under_slow_sockets(base: str, n: int, seconds: float, real: Upload) -> list[Reply]:
    """/health every 2 s for `seconds`, and `real` posted half-way, while `n` slow sockets are
    held from another address of this machine (127.0.0.2)."""
    host, port = base.removeprefix("http://").split(":")
    slow = SlowSockets(host, int(port), n, "127.0.0.2")
    slow.thread.start()
    replies, start = [], time.monotonic()
    with httpx.Client(base_url=base, timeout=30) as client:
        while (elapsed := time.monotonic() - start) < seconds:
            asked = time.perf_counter()
            try:
                status, detail = client.get("/health").status_code, ""
            except httpx.HTTPError as err:
                status, detail = 0, f"{type(err).__name__}: {err}"
            took = time.perf_counter() - asked
            replies.append(Reply(status, detail, took, "health"))
            if not any(r.part == "real" for r in replies) and elapsed > seconds / 2:
                replies.append(post(base, *real, "real"))
            time.sleep(max(0.0, 2.0 - took))
    slow.stop.set()
    slow.thread.join(timeout=30)
    held = f"{n} slow sockets held ({slow.opened} opened); answered: {dict(slow.answers)}"
    return [Reply(-1, held, 0.0, "slow"), *replies]


def staff_page(pixels: int, staves: int) -> bytes:
    """A blank page of `staves` five-line staves, A4-shaped, `pixels` in all: nothing on the
    staves, so each is hard for the model, and the PNG tiny (the issue's: 39.6 M pixels, 29
    staves, 58 KB)."""
    height = int((pixels * 1.414) ** 0.5)
    width = pixels // height
    img = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(img)
    gap, step = max(4, height // 300), (height - height // 20) // staves
    for staff in range(staves):
        for line in range(5):
            y = height // 40 + staff * step + line * gap
            draw.line((width // 20, y, width - width // 20, y), fill=0, width=max(1, gap // 5))
    return png(img)


def one_staff() -> bytes:
    """A small image of one staff with a few note heads: what a client usually sends."""
    img = Image.new("L", (1200, 160), 255)
    draw = ImageDraw.Draw(img)
    for line in range(5):
        draw.line((20, 50 + 12 * line, 1180, 50 + 12 * line), fill=0, width=2)
    for i, step in enumerate((0, 2, 4, 3, 1, 5, 2, 0)):
        x, y = 120 + 130 * i, 92 - 6 * step
        draw.ellipse((x, y - 5, x + 14, y + 5), fill=0)
        draw.line((x + 13, y, x + 13, y - 36), fill=0, width=2)
    return png(img)


def spoken() -> bytes:
    """A few seconds of espeak-ng French, as a WAV."""
    pcm, rate = synthesize("Bonjour, il fait beau à Paris ce matin.", "m1", 170, 50)
    buf = io.BytesIO()
    soundfile.write(buf, pcm, rate, format="WAV")
    return buf.getvalue()


def silent_flac(seconds: int, channels: int, rate: int) -> bytes:
    """`seconds` of silence, written a second at a time (the whole would be gigabytes)."""
    buf = io.BytesIO()
    block = np.zeros((rate, channels), dtype=np.int16)
    with soundfile.SoundFile(buf, "w", rate, channels, "PCM_16", format="FLAC") as f:
        for _ in range(seconds):
            f.write(block)
    return buf.getvalue()


def crowd_cases() -> list[Case]:
    """The issue's hostile requests beside four small ones, and the slow client."""
    page = staff_page(39_600_000, 29)
    audio = silent_flac(599, 8, 192_000)
    smalls = [("/read", f"staff{i}.png", one_staff()) for i in (1, 2)]
    smalls += [("/transcribe", f"clip{i}.wav", spoken()) for i in (1, 2)]
    return [
        Case(
            "page_29_staves_beside_4_small",
            f"39.6 MP page of 29 empty staves, {kb(page)}; then 2 staves, 2 clips",
            lambda b: beside(b, ("/read", "page.png", page), smalls),
        ),
        Case(
            "flac_599s_8ch_beside_4_small",
            f"599 s x 8 channels at 192 kHz (silence), {kb(audio)}; then 2 staves, 2 clips",
            lambda b: beside(b, ("/transcribe", "long.flac", audio), smalls),
        ),
        Case(
            "slow_sockets_70",
            "70 slow sockets from 127.0.0.2 for 40 s; /health every 2 s, one upload",
            lambda b: under_slow_sockets(b, 70, 40.0, smalls[0]),
        ),
    ]


def cases(params_path: Path, parallel_n: int) -> list[Case]:
    params = load_params(params_path)
    image, serve = params.infer.score.image, params.serve
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
        *crowd_cases(),
    ]


def kb(data: bytes) -> str:
    return f"{len(data) // 1024:,} KB"


def one(path: str, name: str, data: bytes) -> Callable[[str], list[Reply]]:
    return lambda base: [post(base, path, name, data)]
