"""Hostile uploads and slow clients against the HTTP service: each limit answers a 4xx that
names it and its param, decoding runs in bounded slots, and slow clients are cut off.

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
from infer_tiny import TINY_INFER, score_model, speech_model, speech_wav
from live_server import free_port, running
from PIL import Image

import sonfolio.serve
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
    with running(config, timeout_s=30) as client:
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


def raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


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
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
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
