"""Hostile uploads against the HTTP service: each limit answers a 4xx that names it and its
param, decoding runs in slots that share a memory budget, work over the per-request budget is
refused before it is done, and a long request takes turns with the others on the model. Slow
clients and connections: tests/hostile/test_service_clients.py.

The service runs on a real uvicorn server (sonfolio.serve.server_config, as `sonfolio serve`
runs it) on a free loopback port (tests/hostile/service.py), with the tiny untrained models of
tests/infer_tiny.py (tests/hostile/conftest.py).
"""

from __future__ import annotations

import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import soundfile
from hostile.service import png, post, serving  # tests/ is on sys.path
from infer_tiny import stack
from PIL import Image

import sonfolio.serve
import sonfolio.variants


def test_an_image_over_max_pixels_gets_413_naming_the_param(server, params):
    client, _ = server
    side = int(params.infer.score.image.max_pixels**0.5) + 100
    # A real, highly compressible PNG: 45 M blank pixels in a few tens of KB.
    big = png(Image.new("1", (side, side), 1))
    assert len(big) < 1024 * 1024  # under max_upload_mb: the pixel limit is what refuses it
    r = post(client, "/read", "huge.png", big)
    assert r.status_code == 413, r.text
    assert "infer.score.image.max_pixels" in r.json()["detail"]


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
