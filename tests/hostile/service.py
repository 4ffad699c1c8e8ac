"""The service for the hostile tests (tests/hostile/test_service.py and
test_service_clients.py): `serving` runs it on a real uvicorn server (sonfolio.serve.server_config,
as `sonfolio serve` runs it) on a free loopback port, with short deadlines (SLOW); `png` and
`post` make and send an upload."""

from __future__ import annotations

import io
from contextlib import contextmanager

import httpx
from live_server import free_port, running  # tests/ is on sys.path
from PIL import Image

from sonfolio.serve import create_app, server_config

SLOW = {"header_timeout_s": 1.0, "body_timeout_s": 1.0, "busy_timeout_s": 0.5}


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


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def post(client: httpx.Client, path: str, name: str, data: bytes) -> httpx.Response:
    return client.post(path, files={"file": (name, data, "application/octet-stream")})
