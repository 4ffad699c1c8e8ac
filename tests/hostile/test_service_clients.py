"""Slow clients and connections against the HTTP service: a slow body gets 408 naming its
param, slow headers are cut off and a fast client is not, oversized headers are refused, and no
one client's sockets make the service unreachable, since requests in flight are counted (in all
and per client address), never open sockets. Hostile uploads: tests/hostile/test_service.py.

The service runs on a real uvicorn server (sonfolio.serve.server_config, as `sonfolio serve`
runs it) on a free loopback port with 1 s deadlines (tests/hostile/service.py: SLOW), with the
tiny untrained models of tests/infer_tiny.py (tests/hostile/conftest.py).
"""

from __future__ import annotations

import re
import socket
import threading
import time

import httpx
import pytest
from hostile.service import png, post, serving  # tests/ is on sys.path
from PIL import Image


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
