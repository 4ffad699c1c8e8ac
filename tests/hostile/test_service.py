"""Hostile uploads and slow clients against the HTTP service: each limit answers a 4xx that
names it and its param, decoding runs in slots that share a memory budget, work over the
per-request budget is refused before it is done, a long request takes turns with the others on
the model, slow clients are cut off, and no one client's sockets make the service unreachable.

The service runs on a real uvicorn server (sonfolio.serve.server_config, as `sonfolio serve`
runs it) on a free loopback port, with the tiny untrained models of tests/infer_tiny.py.
"""

from __future__ import annotations

import io
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
import soundfile
from infer_tiny import (
    SYSTEMS,
    TINY_INFER,
    render_systems,
    score_model,
    speech_model,
    speech_wav,
    stack,
)
from live_server import free_port, running
from PIL import Image

import sonfolio.serve
import sonfolio.variants
from sonfolio.config.params import parse_params
from sonfolio.serve import create_app, server_config

SLOW = {"header_timeout_s": 1.0, "body_timeout_s": 1.0, "busy_timeout_s": 0.5}


@pytest.fixture(scope="module")
def models(tmp_path_factory, params):
    root = tmp_path_factory.mktemp("hostile_serve")
    raw = params.model_dump(mode="json")
    raw["infer"].update(TINY_INFER)  # few tokens, audio cuts for the tiny model's 2 s window
    return {
        "infer": parse_params(raw).infer,
        "score": score_model(root / "score"),
        "speech": speech_model(root / "speech", params),
        "wav": speech_wav(root / "clip.wav", seconds=1.0).read_bytes(),
        "systems": render_systems(SYSTEMS),  # real engravings, one staff each
    }


@contextmanager
def serving(params, models, **serve):
    """The service with `serve` keys replaced, on uvicorn in a thread; an httpx client."""
    cfg = params.serve.model_copy(update={**SLOW, "max_upload_mb": 1.0, **serve})
    app = create_app(
        models["infer"], cfg, models["score"], models["speech"], threads=1, device="cpu"
    )
    config = server_config(app, cfg, "127.0.0.1", free_port())
    config.log_level = "warning"
    # the client's timeout bounds a hung server, it times nothing: generous, so a machine
    # whose every core another job uses still passes
    with running(config, timeout_s=300) as client:
        yield client, config.port


@pytest.fixture(scope="module")
def server(params, models):
    with serving(params, models) as (client, port):
        yield client, port


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def post(client: httpx.Client, path: str, name: str, data: bytes) -> httpx.Response:
    return client.post(path, files={"file": (name, data, "application/octet-stream")})


def test_an_image_over_max_pixels_gets_413_naming_the_param(server, params):
    client, _ = server
    side = int(params.infer.image.max_pixels**0.5) + 100
    # A real, highly compressible PNG: 45 M blank pixels in a few tens of KB.
    big = png(Image.new("1", (side, side), 1))
    assert len(big) < 1024 * 1024  # under max_upload_mb: the pixel limit is what refuses it
    r = post(client, "/read", "huge.png", big)
    assert r.status_code == 413, r.text
    assert "infer.image.max_pixels" in r.json()["detail"]


def test_an_animated_gif_gets_415(server):
    client, _ = server
    frames = [Image.new("L", (40, 40), shade) for shade in (0, 255)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    r = post(client, "/read", "anim.gif", buf.getvalue())
    assert r.status_code == 415 and "several frames" in r.json()["detail"]


def test_a_16_bit_tiff_is_read(server):
    client, _ = server
    pixels = np.full((64, 256), 60000, dtype=np.uint16)
    pixels[20:40, 10:-10] = 3000
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="TIFF")
    r = post(client, "/read", "scan.tif", buf.getvalue())
    assert r.status_code == 200, r.text
    assert r.json()["systems"], "the ink of a 16-bit scan was not seen"


def concurrent_posts(client, path, name, data, n):
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: post(client, path, name, data), range(n)))


@pytest.mark.parametrize(
    ("path", "opener", "upload"),
    [("/read", "open_image", "image"), ("/transcribe", "open_audio", "wav")],
)
def test_uploads_are_decoded_one_slot_at_a_time(params, models, monkeypatch, path, opener, upload):
    """With one slot, parallel uploads never decode at once; one that waits past
    serve.busy_timeout_s gets 503 naming the param, the others are answered."""
    real, inside, most = getattr(sonfolio.serve, opener), [0], [0]
    guard = threading.Lock()

    def slow_open(*args, **kwargs):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.4)
        try:
            return real(*args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(sonfolio.serve, opener, slow_open)
    data = png(Image.new("L", (200, 60), 255)) if upload == "image" else models["wav"]
    with serving(params, models, max_concurrent_decodes=1, busy_timeout_s=0.6) as (client, _):
        replies = concurrent_posts(client, path, "x", data, 4)
    codes = sorted(r.status_code for r in replies)
    assert most[0] == 1, "two uploads were decoded at once"
    assert codes[0] == 200 and codes[-1] == 503, codes
    busy = next(r for r in replies if r.status_code == 503)
    assert "serve.max_concurrent_decodes" in busy.json()["detail"]
    assert busy.headers["retry-after"]


def raw(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection to the service from `source`: any address of 127.0.0.0/8 is this machine,
    so a test can be several clients."""
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def trickle(sock: socket.socket, data: bytes, window_s: float) -> tuple[bytes, bool, float]:
    """Send `data` a byte every 0.2 s, as a slow client does, until the server answers (the end
    of a response's headers) or closes the connection, or `window_s` passes: what it sent back,
    whether it closed, and after how long.

    A close is an orderly one (recv returns b"") or a reset: the server's kernel answers a close
    with RST instead of FIN when bytes we trickled are still unread in its socket, which is
    likely when its event loop is slow to read them on a busy machine. Either way it cut us off.
    `window_s` is the only bound: a server that never cuts the client keeps it until then."""
    start, got, pending = time.monotonic(), b"", iter(data)
    sock.settimeout(0.2)
    while time.monotonic() - start < window_s:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            byte = next(pending, None)
            if byte is not None:
                try:
                    sock.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    return got, True, time.monotonic() - start
            continue
        except ConnectionResetError:
            return got, True, time.monotonic() - start
        if not chunk:
            return got, True, time.monotonic() - start
        got += chunk
        if b"\r\n\r\n" in got:
            return got, False, time.monotonic() - start
    return got, False, time.monotonic() - start


def body_of(sock: socket.socket, got: bytes) -> bytes:
    """The body of the response whose start `trickle` returned, read to its Content-Length
    (Linux hands over received data before reporting a reset that came after it)."""
    head, _, body = got.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    sock.settimeout(30)
    try:
        while len(body) < length and (chunk := sock.recv(65536)):
            body += chunk
    except ConnectionResetError:  # the server closed with our trickled bytes unread: RST
        pass
    return body


# How long a slow client watches for the server's 1 s deadlines (SLOW) to act. Generous, so a
# busy machine's late timers pass; still a real bound: uvicorn alone never cuts a client that
# keeps trickling (its keep-alive timer is armed only after a response, and reset by each byte).
WINDOW_S = 10.0


def test_a_slow_body_gets_408_naming_the_param(server):
    _, port = server
    with raw(port) as sock:
        sock.sendall(
            b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
            b"boundary=b\r\nContent-Length: 5000\r\n\r\n--b\r\n"
        )
        got, _, took = trickle(sock, b"x" * 100, WINDOW_S)
        assert got.startswith(b"HTTP/1.1 408"), f"after {took:.1f} s (deadline 1 s): {got[:200]}"
        assert b"serve.body_timeout_s" in body_of(sock, got)


def test_slow_headers_are_cut_off(server):
    _, port = server
    with raw(port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        got, closed, took = trickle(sock, b"X-Slow: " + b"a" * 100, WINDOW_S)
    assert closed, f"still connected after {took:.1f} s of slow headers, the deadline is 1 s"
    assert got == b"", got[:200]  # closed, never answered


def test_a_fast_client_is_not_cut_off(server):
    client, _ = server
    for _ in range(3):  # keep-alive: the deadline is armed again after each response
        assert client.get("/health").status_code == 200
    # Idle past header_timeout_s (1 s), within keep_alive_s: the server closes the idle
    # connection at 1 s and the client reconnects. Well past 1 s, so a busy machine's late
    # close timer does not race the next request on the old connection.
    time.sleep(3.0)
    assert client.get("/health").status_code == 200


def test_oversized_headers_are_refused(server, params):
    client, _ = server
    assert client.get("/health", headers={"X-Small": "a" * 1024}).status_code == 200
    # h11 bounds the headers it buffers unfinished: headers that arrive over several reads
    # (asyncio reads up to 256 KB at once) and pass serve.max_header_kb are refused.
    big = "a" * (params.serve.max_header_kb * 1024 * 64)
    try:
        status = client.get("/health", headers={"X-Big": big}).status_code
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
        status = 400  # answered 400 and closed while the client was still sending
    assert status == 400


# The work one request asks for, and how requests share the service.


def timed_post(
    client: httpx.Client, path: str, name: str, data: bytes
) -> tuple[httpx.Response, float]:
    """The answer, and when it came (time.monotonic)."""
    return post(client, path, name, data), time.monotonic()


def slowed_model(monkeypatch, seconds: float) -> list[int]:
    """Every model call takes `seconds` more, as a real model's does on a hard staff (the tiny
    models answer in milliseconds); the rows of each call, in the order they ended."""
    real, calls = sonfolio.variants.Variant.generate, []

    def slow(self, inputs, *args, **kwargs):
        time.sleep(seconds)
        texts = real(self, inputs, *args, **kwargs)
        calls.append(len(inputs))
        return texts

    monkeypatch.setattr(sonfolio.variants.Variant, "generate", slow)
    return calls


def test_a_page_of_29_staves_takes_turns_with_small_requests(params, models, monkeypatch):
    """A page of 29 staves, 29 model calls, held the only decode slot and the model for all of
    them: requests sent beside it waited, then got 503. Now four small ones sent while it is
    read (two images, two clips) are each answered before it, and it is read whole.

    No race with the machine's load: each of the page's calls after its first holds the model
    until every small image not yet answered waits its turn on it and both clips (the other
    model) are answered; the service's turns must then hand the model to the waiting images
    before the page's next call, or the page ends first."""
    from sonfolio.infer import budget

    turns: dict[str, budget.Turns] = {}  # each model's turns, as the service made them
    shared_init = budget.Shared.__init__

    def record(self, variant):
        shared_init(self, variant)
        turns[variant.track] = self.turns

    monkeypatch.setattr(budget.Shared, "__init__", record)
    answered: dict[str, int] = {"/read": 0, "/transcribe": 0}
    page_thread: list[int] = []
    stuck: list[str] = []
    real, calls = sonfolio.variants.Variant.generate, []

    def paced(self, inputs, *args, **kwargs):
        if not page_thread:  # the page's first staff: no small request is sent before it
            page_thread.append(threading.get_ident())
        elif threading.get_ident() == page_thread[0]:
            deadline = time.monotonic() + 120
            while (
                len(turns["score"]._waiting) < 2 - answered["/read"] or answered["/transcribe"] < 2
            ):
                if time.monotonic() > deadline:
                    stuck.append(f"after 120 s: {answered}, {len(turns['score']._waiting)} waiting")
                    break
                time.sleep(0.02)
        texts = real(self, inputs, *args, **kwargs)
        calls.append(len(inputs))
        return texts

    monkeypatch.setattr(sonfolio.variants.Variant, "generate", paced)
    page = png(stack([models["systems"][i % 3] for i in range(29)])[0])
    small = png(Image.new("L", (200, 60), 255))
    smalls = [("/read", "a.png", small), ("/read", "b.png", small)]
    smalls += [("/transcribe", "a.wav", models["wav"]), ("/transcribe", "b.wav", models["wav"])]

    def counted(path: str, name: str, data: bytes) -> tuple[httpx.Response, float]:
        reply = timed_post(client, path, name, data)
        answered[path] += 1
        return reply

    with (
        serving(params, models, busy_timeout_s=300.0) as (client, _),
        ThreadPoolExecutor(1 + len(smalls)) as pool,
    ):
        big = pool.submit(timed_post, client, "/read", "page.png", page)
        deadline = time.monotonic() + 300
        while not calls:  # the page is cut and its first staff read
            assert not big.done(), big.result()[0].text
            assert time.monotonic() < deadline, "no staff of the page was read in 300 s"
            time.sleep(0.05)
        replies = [f.result() for f in [pool.submit(counted, *s) for s in smalls]]
        page_reply, page_done = big.result()
    assert not stuck, stuck
    assert page_reply.status_code == 200, page_reply.text
    assert len(page_reply.json()["systems"]) == 29
    for (reply, done), (_, name, _) in zip(replies, smalls, strict=True):
        assert reply.status_code == 200, reply.text
        assert done < page_done, f"{name} waited for the whole page"
    assert calls.count(1) == len(calls), "serve.batch_size 1: one staff or chunk a call"


def test_a_page_over_max_staves_gets_413_before_any_staff_is_read(params, models, monkeypatch):
    calls = slowed_model(monkeypatch, 0.0)
    with serving(params, models, max_staves=2) as (client, _):
        over = post(client, "/read", "three.png", png(stack(models["systems"])[0]))
        assert calls == [], "staves were read before the count refused the page"
        within = post(client, "/read", "two.png", png(stack(models["systems"][:2])[0]))
    assert over.status_code == 413, over.text
    detail = over.json()["detail"]
    assert "three.png: 3 staves found" in detail and "serve.max_staves is 2" in detail
    assert within.status_code == 200 and len(within.json()["systems"]) == 2


def flac(seconds: float, channels: int, rate: int) -> bytes:
    buf = io.BytesIO()
    tone = 0.1 * np.sin(2 * np.pi * 220 * np.arange(int(seconds * rate)) / rate)
    soundfile.write(buf, np.repeat(tone[:, None], channels, 1), rate, format="FLAC")
    return buf.getvalue()


def test_audio_over_max_audio_samples_gets_413_before_decoding(params, models, monkeypatch):
    real, opened = sonfolio.serve.open_audio, []

    def spy(data, name, limits):
        opened.append(name)
        return real(data, name, limits)

    monkeypatch.setattr(sonfolio.serve, "open_audio", spy)
    with serving(params, models, max_audio_samples=50_000) as (client, _):
        over = post(client, "/transcribe", "stereo.flac", flac(1.0, 2, 48_000))  # 96,000
        within = post(client, "/transcribe", "mono.wav", models["wav"])  # 1 s at 22,050 Hz
    assert over.status_code == 413, over.text
    detail = over.json()["detail"]
    assert "1 s x 2 channels at 48,000 Hz = 96,000 samples" in detail
    assert "serve.max_audio_samples is 50,000" in detail
    assert within.status_code == 200, within.text
    assert opened == ["mono.wav"], "the refused file was decoded"


def test_a_small_upload_is_decoded_beside_a_large_one_but_two_large_ones_wait(
    params, models, monkeypatch
):
    """serve.decode_memory_mb (10 here) holds one large image (1000 x 1000: ~7 MB estimated, 7
    bytes a pixel) and small ones: a small upload is decoded while a large one is, and the
    second large one waits for the first."""
    real, inside, entered = sonfolio.serve.open_image, [], []
    guard, small_in = threading.Lock(), threading.Event()

    def gated(data, name, limits):
        with guard:
            entered.append((name, tuple(inside)))
            inside.append(name)
        try:
            if name == "small.png":
                small_in.set()
            else:  # a large one keeps its memory until a small one has come in beside it
                small_in.wait(30)
            return real(data, name, limits)
        finally:
            with guard:
                inside.remove(name)

    monkeypatch.setattr(sonfolio.serve, "open_image", gated)
    large = png(Image.new("L", (1000, 1000), 255))
    small = png(Image.new("L", (200, 60), 255))
    with (
        serving(params, models, decode_memory_mb=10.0, busy_timeout_s=60.0) as (client, _),
        ThreadPoolExecutor(2) as pool,
    ):
        larges = [pool.submit(post, client, "/read", f"large{i}.png", large) for i in (1, 2)]
        deadline = time.monotonic() + 60
        while not entered:
            assert time.monotonic() < deadline, "no large image was decoded in 60 s"
            time.sleep(0.05)
        small_reply = post(client, "/read", "small.png", small)
        statuses = [f.result().status_code for f in larges]
    assert small_reply.status_code == 200 and statuses == [200, 200], small_reply.text
    beside = dict(entered)
    assert any(n.startswith("large") for n in beside["small.png"]), entered
    for name in ("large1.png", "large2.png"):
        assert not any(n.startswith("large") for n in beside[name]), entered


# Connections: requests in flight are counted, per client address, never open sockets.

SLOW_HEAD = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "
SLOW_BODY = (
    b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
    b"Content-Length: 100000\r\n\r\n--b\r\n"
)


class SlowClient(threading.Thread):
    """One slow socket from `source`, kept open until `stop`: it sends `start`, then a byte
    every 0.5 s; cut, reset or answered, it opens another 0.2 s later."""

    def __init__(self, port: int, source: str, start: bytes, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.source, self.start_bytes, self.stop = port, source, start, stop
        self.opened, self.statuses = 0, []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with raw(self.port, self.source) as sock:
                    self.opened += 1
                    sock.sendall(self.start_bytes)
                    self._trickle(sock)
            except OSError:  # refused, reset or broken: the server cut it
                pass
            self.stop.wait(0.2)

    def _trickle(self, sock: socket.socket) -> None:
        sock.settimeout(0.5)
        while not self.stop.is_set():
            try:
                got = sock.recv(4096)
            except TimeoutError:
                sock.sendall(b"x")
                continue
            if got.startswith(b"HTTP/1.1 "):
                self.statuses.append(int(got.split()[1]))
            return


def test_70_slow_sockets_from_one_client_leave_the_service_answering(params, models):
    """serve.max_connections counted open sockets: 70 slow ones from one client, each within
    the header and body deadlines and reopened when cut, made /health answer 503 on every
    check. Now /health answers every check and a real upload from another client is read;
    the slow client gets 429 past its own share of requests in flight."""
    stop = threading.Event()
    with serving(params, models, header_timeout_s=10.0, body_timeout_s=60.0) as (client, port):
        slow = [
            SlowClient(port, "127.0.0.2", SLOW_HEAD if i % 2 else SLOW_BODY, stop)
            for i in range(70)
        ]
        for s in slow:
            s.start()
        try:
            deadline = time.monotonic() + 60
            while min(s.opened for s in slow) == 0:
                assert time.monotonic() < deadline, "the slow sockets did not all open"
                time.sleep(0.05)
            checks = []
            for _ in range(12):
                checks.append(client.get("/health").status_code)
                time.sleep(0.25)
            real = post(client, "/read", "small.png", png(Image.new("L", (200, 60), 255)))
        finally:
            stop.set()
            for s in slow:
                s.join(timeout=10)
    assert checks == [200] * 12, checks
    assert real.status_code == 200, real.text
    refused = [st for s in slow for st in s.statuses]
    assert 429 in refused, f"the slow client was never held to its share: {refused[:20]}"


def client_from(port: int, source: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=source)
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", transport=transport, timeout=30)


def first_answer(probe: httpx.Client, status: int, within_s: float = 30.0) -> httpx.Response:
    """GET / (the page: counted, cheap) until it answers `status`, or `within_s` passes."""
    deadline = time.monotonic() + within_s
    while (r := probe.get("/")).status_code != status and time.monotonic() < deadline:
        time.sleep(0.1)
    return r


@pytest.mark.parametrize(
    ("cap", "slow_sources", "probe_source", "status", "param"),
    [
        ("max_requests_per_client", ("127.0.0.2",) * 2, "127.0.0.2", 429, "per_client"),
        ("max_requests", ("127.0.0.2", "127.0.0.3"), "127.0.0.1", 503, "max_requests"),
    ],
)
def test_requests_past_a_cap_are_refused_until_those_in_flight_end(
    params, models, cap, slow_sources, probe_source, status, param
):
    """Two uploads whose bodies trickle in fill a cap of 2: the next request from their client
    (per client) or from anyone (in all) is refused at once, with Retry-After and the param;
    /health is answered all along; once they are gone, requests are taken again."""
    with serving(params, models, body_timeout_s=60.0, **{cap: 2}) as (client, port):
        slow = [raw(port, source) for source in slow_sources]
        try:
            for sock in slow:
                sock.sendall(SLOW_BODY)
            with client_from(port, probe_source) as probe:
                refused = first_answer(probe, status)
                health = probe.get("/health")
                if status == 429:
                    other = client.get("/")  # another client's share is its own
                    assert other.status_code == 200, other.text
        finally:
            for sock in slow:
                sock.close()
        with client_from(port, probe_source) as probe:
            again = first_answer(probe, 200)
    assert refused.status_code == status, refused.text
    assert f"serve.{cap}" in refused.json()["detail"] and refused.headers["retry-after"]
    assert health.status_code == 200
    assert again.status_code == 200, f"the closed uploads are still counted: {again.text}"
