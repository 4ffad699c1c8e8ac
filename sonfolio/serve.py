"""The HTTP service: POST /read (a score image), POST /transcribe (audio), GET /health, and a
page at `/` that uses them (sonfolio.web) with POST /engrave (one system's text as SVG).

`sonfolio serve` runs it with uvicorn on 127.0.0.1 (params.yaml `serve`); docs/inference.md has
the endpoints and curl examples. `create_app` takes each model as a loaded variant or as a
folder, which the app's lifespan loads once at startup. Uploads larger than
`serve.max_upload_mb` get 413 before their body is read past the limit; an upload that is not an
image (or not audio) gets 415, a damaged or empty one 400, one over an infer limit 413 or 422,
each with a message that names the limit and its param. No error response carries a traceback:
unexpected errors are logged here and answered with 500.

Memory and slow clients (docs/security.md): an upload is decoded and read inside one of
`serve.max_concurrent_decodes` slots, so parallel large-but-allowed uploads queue instead of
each holding its decoded pixels or samples (503 after `serve.busy_timeout_s` in the queue). A
request's headers must arrive within `serve.header_timeout_s` of the connection (uvicorn has no
such deadline: `HeaderDeadline` adds it) and its body within `serve.body_timeout_s` (408,
`UploadLimit`); uvicorn's own options bound header size, idle keep-alive and connections.
POST /engrave runs LilyPond only on text that passes the canonical grammar, shorter than
`sonfolio.web.engrave.MAX_TEXT_CHARS`, inside a decode slot and with a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import FastAPI, File, HTTPException, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from sonfolio import tracks
from sonfolio.infer.formats import read_lilypond, read_result, read_text, transcript_result
from sonfolio.infer.inputs import BadInput, display_name, open_audio, open_image
from sonfolio.infer.run import check_fit, load_model, read_image, transcribe
from sonfolio.score.common.lilypond import LilyPondNotFound, find_lilypond
from sonfolio.score.common.musicxml import reading_musicxml
from sonfolio.speech.common.audio import SAMPLE_RATE
from sonfolio.variants import Variant
from sonfolio.web import engrave
from sonfolio.web.page import SVG_CSP, add_page

if TYPE_CHECKING:
    import uvicorn

    from sonfolio.config.infer import Infer, Serve

log = logging.getLogger(__name__)

STATUS = {
    "unsupported": 415,
    "missing": 400,
    "corrupt": 400,
    "empty": 400,
    "too_large": 413,
    "limit": 422,
}


def return_freed_memory() -> bool:
    """Have glibc give freed memory back to the system; True where it applied (glibc only).

    Requests are served on a pool of threads, and glibc gives each thread its own malloc arena
    that keeps what a decoded page freed (tens of MB each): four large pages one after another
    on four threads held over 1 GB though at most one was decoded at a time. Two arenas, and
    blocks over 1 MB taken straight from the kernel (returned on free), keep the peak near one
    page's worth (benchmarks/hostile_uploads.py). There is no Python API for it: `mallopt`
    through ctypes, as the environment variables MALLOC_ARENA_MAX / MALLOC_MMAP_THRESHOLD_
    would, but those must be set before the process starts.
    """
    import ctypes
    import ctypes.util

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    m_mmap_threshold, m_arena_max = -3, -8  # from glibc's malloc.h
    return bool(libc.mallopt(m_arena_max, 2)) and bool(libc.mallopt(m_mmap_threshold, 1 << 20))


@dataclass
class Models:
    """The service's models by track, each loaded once (`threads`, `device` as in variants)."""

    sources: dict[str, Variant | Path | None]
    threads: int | None = None
    device: str = "auto"
    loaded: dict[str, Variant] = field(default_factory=dict)
    locks: dict[str, threading.Lock] = field(default_factory=dict)

    def load(self, cfg: Infer) -> None:
        for track, source in self.sources.items():
            if source is None:
                log.warning("no %s model: its endpoint answers 503", track)
                continue
            variant = source if isinstance(source, Variant) else None
            variant = variant or load_model(Path(source), track, self.threads, self.device)
            check_fit(variant, cfg)
            self.loaded[track] = variant
            self.locks[track] = threading.Lock()

    def get(self, track: str) -> tuple[Variant, threading.Lock]:
        if track not in self.loaded:
            flag = tracks.face(track, "infer").model_flag
            raise HTTPException(503, f"no {track} model is loaded: restart with {flag} FOLDER")
        return self.loaded[track], self.locks[track]


class UploadLimit:
    """ASGI middleware: 413 for a request body over `max_bytes`, read no further than that;
    408 for a body that has not all arrived `timeout_s` after the request's headers.

    A declared Content-Length over the limit is refused before any of the body is read; a body
    without one (chunked) is counted as it arrives and refused once it passes the limit. The
    deadline covers the whole body, not each read, so a client that trickles a byte a second
    cannot hold a worker for longer than `timeout_s`.
    """

    def __init__(self, app: Any, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    def _too_slow(self) -> HTTPException:
        return HTTPException(
            408,
            f"the upload did not arrive within {self.timeout_s:g} s (serve.body_timeout_s): "
            "send it faster, or raise serve.body_timeout_s in params.yaml",
        )

    def _too_large(self) -> HTTPException:
        return HTTPException(
            413, f"upload larger than the limit of {self.max_bytes} bytes (serve.max_upload_mb)"
        )

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            status = 413 if declared.isdigit() else 400
            detail = self._too_large().detail if status == 413 else "bad Content-Length header"
            await JSONResponse({"detail": detail}, status)(scope, receive, send)
            return
        seen, done = 0, False
        deadline = time.monotonic() + self.timeout_s

        async def counted() -> dict:
            nonlocal seen, done
            if done:  # the body is in: later reads wait for a disconnect, with no deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), deadline - time.monotonic())
            except TimeoutError:
                raise self._too_slow() from None
            done = message["type"] != "http.request" or not message.get("more_body", False)
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise self._too_large()  # FastAPI passes HTTPException through body parsing
            return message

        await self.app(scope, counted, send)


def header_deadline(timeout_s: float) -> type:
    """uvicorn's h11 protocol with a deadline for a request's headers: a connection whose next
    request's headers have not all arrived `timeout_s` after it opened (or after the previous
    response) is closed. uvicorn times out only idle keep-alive connections, and a client that
    sends a header byte now and then resets that timer (slowloris)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            # The request cycle now: a new request's complete headers replace it.
            self._header_timer = self.loop.call_later(timeout_s, self._expired, self.cycle)

        def _expired(self, cycle: object) -> None:
            if self.cycle is cycle and not self.transport.is_closing():
                log.warning("closed a connection whose request headers took over %g s", timeout_s)
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

    return HeaderDeadline


def server_config(app: FastAPI, cfg: Serve, host: str, port: int) -> uvicorn.Config:
    """uvicorn's settings for the service: every limit on connections from params.yaml `serve`."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        http=header_deadline(cfg.header_timeout_s),
        h11_max_incomplete_event_size=cfg.max_header_kb * 1024,
        timeout_keep_alive=cfg.keep_alive_s,
        limit_concurrency=cfg.max_connections,
    )


@contextmanager
def decode_slot(slots: threading.BoundedSemaphore, cfg: Serve) -> Iterator[None]:
    """One of serve.max_concurrent_decodes slots, waited for up to serve.busy_timeout_s.

    Raises:
        HTTPException: 503 when no slot frees in time.
    """
    if not slots.acquire(timeout=cfg.busy_timeout_s):
        raise HTTPException(
            503,
            f"busy: {cfg.max_concurrent_decodes} uploads are being read "
            f"(serve.max_concurrent_decodes) and none finished within {cfg.busy_timeout_s:g} s "
            "(serve.busy_timeout_s): retry later",
            headers={"Retry-After": str(max(1, round(cfg.busy_timeout_s)))},
        )
    try:
        yield
    finally:
        slots.release()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("sonfolio", "torch", "transformers", "onnxruntime", "optimum"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def create_app(
    cfg: Infer,
    serve: Serve,
    score: Variant | Path | None,
    speech: Variant | Path | None,
    threads: int | None = None,
    device: str = "auto",
    lilypond: Path | None = None,
) -> FastAPI:
    """The service. `score` / `speech`: a loaded variant, a folder to load at startup, or None
    (that endpoint then answers 503). `serve`: its upload size, body deadline and decode slots
    (uvicorn's connection limits are `server_config`'s). `lilypond`: the binary /engrave runs;
    None: `find_lilypond`'s, looked up at the first engraving (none found: 503)."""
    models = Models({"score": score, "speech": speech}, threads, device)
    # Threads, not asyncio: the endpoints are sync and run in Starlette's thread pool.
    slots = threading.BoundedSemaphore(serve.max_concurrent_decodes)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        models.load(cfg)  # once, before the first request
        yield

    app = FastAPI(title="Sonfolio", lifespan=lifespan)
    app.add_middleware(
        UploadLimit,
        max_bytes=int(serve.max_upload_mb * 1024 * 1024),
        timeout_s=serve.body_timeout_s,
    )

    @app.exception_handler(BadInput)
    def _bad_input(_: Request, err: BadInput) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, STATUS[err.kind])

    @app.exception_handler(Exception)
    def _unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": "internal error (logged by the server)"}, 500)

    @app.get("/health")
    def health() -> dict:
        loaded = {
            track: {"loaded": track in models.loaded}
            | (
                {"name": v.name, "kind": v.kind, "device": v.device}
                if (v := models.loaded.get(track))
                else {}
            )
            for track in models.sources
        }
        ok = all(m["loaded"] for m in loaded.values())
        return {"status": "ok" if ok else "partial", "models": loaded, "versions": versions()}

    @app.post("/read", response_model=None)
    def read(
        file: Annotated[UploadFile, File(description="an image of one staff system or a page")],
        page: bool | None = None,
        format: Literal["json", "text", "ly", "musicxml"] = "json",
    ) -> dict | Response:
        variant, lock = models.get("score")
        name = display_name(file.filename or "upload")
        with decode_slot(slots, serve):  # the decoded pixels live only inside a slot
            image = open_image(file.file.read(), name, cfg.image)
            with lock:
                reading = read_image(variant, image, page, cfg)
            del image
        if format == "ly":
            return PlainTextResponse(read_lilypond([(name, reading)]), media_type="text/x-lilypond")
        if format == "musicxml":  # a system left out is marked in the score where it stood
            xml, _left_out = reading_musicxml([(name, reading)])
            return Response(xml, media_type="application/vnd.recordare.musicxml+xml")
        if format == "text":
            return PlainTextResponse(read_text([(name, reading)]))
        return {"model": variant.name, **read_result(name, reading)}

    @app.post("/transcribe")
    def transcribe_upload(
        file: Annotated[UploadFile, File(description="WAV, FLAC, OGG or MP3 audio")],
    ) -> dict:
        variant, lock = models.get("speech")
        name = display_name(file.filename or "upload")
        with decode_slot(slots, serve):  # the decoded samples live only inside a slot
            audio = open_audio(file.file.read(), name, cfg.audio_limits)
            with lock:
                chunks, text = transcribe(variant, audio, cfg)
        return {
            "model": variant.name,
            **transcript_result(name, audio.size / SAMPLE_RATE, chunks, text),
        }

    add_engrave(app, serve, slots, lilypond)
    add_page(app)  # last: its headers middleware wraps UploadLimit's answers too
    return app


class EngraveRequest(BaseModel):
    """POST /engrave's body: one system's text and the time signature in force before it (the
    `time` of a system in POST /read's answer)."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="one staff system of canonical LilyPond")
    time: str | None = Field(None, description="N/D, for a system that prints no time")


def add_engrave(
    app: FastAPI, serve: Serve, slots: threading.BoundedSemaphore, lilypond: Path | None
) -> None:
    """POST /engrave: one system's text as an SVG engraved by LilyPond; 413 for a text over
    engrave.MAX_TEXT_CHARS, 422 for one outside the canonical grammar (LilyPond never sees
    it) or that LilyPond cannot engrave, 503 without LilyPond or a free decode slot."""
    found: list[Path] = [lilypond] if lilypond else []

    def binary() -> Path:
        if not found:
            try:
                found.append(find_lilypond())
            except LilyPondNotFound as err:
                raise HTTPException(503, str(err)) from None
        return found[0]

    @app.post("/engrave", response_class=Response)
    def engrave_text(body: EngraveRequest) -> Response:
        if len(body.text) > engrave.MAX_TEXT_CHARS:
            raise HTTPException(
                413,
                f"the text has {len(body.text)} characters, over the limit of "
                f"{engrave.MAX_TEXT_CHARS} (sonfolio.web.engrave.MAX_TEXT_CHARS): "
                "send one staff system at a time",
            )
        why = engrave.refusal(body.text, body.time)
        if why is not None:  # refused before a slot is taken: the check takes ~10 ms at most
            raise HTTPException(422, f"not engraved, {why}")
        exe = binary()
        with decode_slot(slots, serve):  # LilyPond takes a slot as a decode does
            try:
                svg = engrave.engrave_svg(body.text, body.time, exe)
            except engrave.NotEngravable as err:
                raise HTTPException(422, str(err)) from None
        return Response(
            svg, media_type="image/svg+xml", headers={"Content-Security-Policy": SVG_CSP}
        )
