"""A real uvicorn server in a thread, for the service tests (tests/test_serve.py and
tests/hostile/test_service.py, test_service_clients.py): slow clients, header limits and
lifespans need a real socket."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(config: uvicorn.Config, timeout_s: float = 60) -> Iterator[httpx.Client]:
    """`config`'s server started in a thread; an httpx client on its address; stopped after."""
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        base = f"http://{config.host}:{config.port}"
        with httpx.Client(base_url=base, timeout=timeout_s) as client:
            yield client
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
