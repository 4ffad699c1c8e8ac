"""The HTTP service: POST /read (a score image), POST /transcribe (audio), GET /health, and a
page at `/` that uses them (sonfolio.web) with POST /engrave (one system's text as SVG).

`sonfolio serve` runs it with uvicorn on 127.0.0.1 (params.yaml `serve`); docs/inference.md has
the endpoints and curl examples. `create_app` takes each model as a loaded variant or as a
folder, which the app's lifespan loads once at startup. Uploads larger than
`serve.max_upload_mb` get 413 before their body is read past the limit; an upload that is not an
image (or not audio) gets 415, a damaged or empty one 400, one over an infer limit 413 or 422,
each with a message that names the limit and its param. No error response carries a traceback:
unexpected errors are logged here and answered with 500.

Work, memory and slow clients (docs/security.md): what an upload asks for is estimated before
the work (sonfolio.infer.budget): more staves than `serve.max_staves` or more audio samples than
`serve.max_audio_samples` get 413. An upload is decoded and read inside one of
`serve.max_concurrent_decodes` slots that share `serve.decode_memory_mb` by each upload's
estimate, so a small upload passes beside a large one while two large ones queue (503 after
`serve.busy_timeout_s`). Requests take turns on a model call by call (`serve.batch_size`
systems or chunks a call, `Turns`): a page of many staves lets the others' calls in between.
At most `serve.max_requests` requests are in flight, `serve.max_requests_per_client` from one
address (`RequestCaps`); an open connection that has sent no request counts for nothing: a
request's headers must arrive within `serve.header_timeout_s` of the connection (uvicorn has no
such deadline: `HeaderDeadline` adds it) and its body within `serve.body_timeout_s` (408,
`UploadLimit`). /health's versions and the API docs are shown on a loopback bind only
(`serve.versions`, `serve.api_docs`). POST /engrave runs LilyPond only on text that passes the
canonical grammar, shorter than `sonfolio.web.engrave.MAX_TEXT_CHARS`, inside a decode slot and
with a timeout.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import platform
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import FastAPI, File, HTTPException, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from sonfolio import tracks
from sonfolio.infer.budget import (
    Busy,
    DecodeSlots,
    Shared,
    audio_size,
    check_audio_work,
    image_memory,
    read_page,
)
from sonfolio.infer.formats import read_lilypond, read_result, read_text, transcript_result
from sonfolio.infer.inputs import BadInput, display_name, open_audio, open_image
from sonfolio.infer.run import check_fit, load_model, transcribe
from sonfolio.score.common.lilypond import LilyPondNotFound, find_lilypond
from sonfolio.score.common.musicxml import reading_musicxml
from sonfolio.speech.common.audio import SAMPLE_RATE
from sonfolio.variants import Variant
from sonfolio.web import engrave
from sonfolio.web.page import SVG_CSP, add_page

if TYPE_CHECKING:
    import uvicorn

    from sonfolio.config.infer import Infer
    from sonfolio.config.serve import Exposure, Serve

log = logging.getLogger(__name__)

MB = 1024 * 1024
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
    loaded: dict[str, Shared] = field(default_factory=dict)

    def load(self, cfg: Infer) -> None:
        for track, source in self.sources.items():
            if source is None:
                log.warning("no %s model: its endpoint answers 503", track)
                continue
            variant = source if isinstance(source, Variant) else None
            variant = variant or load_model(Path(source), track, self.threads, self.device)
            check_fit(variant, cfg)
            self.loaded[track] = Shared(variant)

    def get(self, track: str) -> Shared:
        if track not in self.loaded:
            flag = tracks.face(track, "infer").model_flag
            raise HTTPException(503, f"no {track} model is loaded: restart with {flag} FOLDER")
        return self.loaded[track]


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


class RequestCaps:
    """ASGI middleware: at most `total` requests in flight, `per_client` from one client
    address; past them 503 (the service is full) or 429 (that client is), with Retry-After,
    before any of the body is read.

    A request is in flight from its complete headers to its answer; an open connection that
    has sent none is not one (uvicorn's limit_concurrency counted open sockets, so 70 slow
    ones from one client made /health answer 503). The address is uvicorn's `client`: behind
    a proxy on this machine, the one its X-Forwarded-For gives. Paths in `exempt` (/health:
    answered on the event loop, it holds nothing) are not counted. Counted on the event loop,
    whose one thread runs every call: no lock.
    """

    def __init__(
        self, app: Any, total: int, per_client: int, exempt: frozenset[str] = frozenset()
    ) -> None:
        self.app, self.total, self.per_client, self.exempt = app, total, per_client, exempt
        self.in_flight, self.by_client = 0, Counter[str]()

    def _refusal(self, client: str) -> tuple[int, str] | None:
        if self.in_flight >= self.total:
            return 503, f"busy: {self.in_flight} requests in flight (serve.max_requests): retry"
        if self.by_client[client] >= self.per_client:
            return 429, (
                f"{self.by_client[client]} requests from {client} are in flight "
                "(serve.max_requests_per_client): wait for their answers, then retry"
            )
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        client = scope["client"][0] if scope.get("client") else "unknown"
        refusal = self._refusal(client)
        if refusal is not None:
            status, detail = refusal
            answer = JSONResponse({"detail": detail}, status, headers={"Retry-After": "1"})
            await answer(scope, receive, send)
            return
        self.in_flight += 1
        self.by_client[client] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self.by_client[client] -= 1
            if not self.by_client[client]:
                del self.by_client[client]


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
    """uvicorn's settings for the service: its limits on connections from params.yaml `serve`
    (no limit_concurrency: it counts open sockets; `RequestCaps` counts requests)."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        http=header_deadline(cfg.header_timeout_s),
        h11_max_incomplete_event_size=cfg.max_header_kb * 1024,
        timeout_keep_alive=cfg.keep_alive_s,
    )


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("sonfolio", "torch", "transformers", "onnxruntime", "optimum"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def is_loopback(host: str) -> bool:
    """Whether `host` is an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve to any address
        return False


def shown(setting: Exposure, host: str) -> bool:
    """Whether something `setting` guards is shown by a service listening on `host`."""
    return setting == "always" or (setting == "loopback" and is_loopback(host))


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
    (that endpoint then answers 503). `serve`: where it listens (`host`: what it shows, by
    `versions` and `api_docs`), its upload size, body deadline, request caps, decode slots and
    work budget (uvicorn's connection limits are `server_config`'s). `lilypond`: the binary
    /engrave runs; None: `find_lilypond`'s, looked up at the first engraving (none found: 503)."""
    models = Models({"score": score, "speech": speech}, threads, device)
    # Threads, not asyncio: the upload endpoints are sync and run in Starlette's thread pool.
    slots = DecodeSlots(serve)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        models.load(cfg)  # once, before the first request
        yield

    docs, listed = shown(serve.api_docs, serve.host), shown(serve.versions, serve.host)
    if not (docs and listed):
        hidden = [k for k, on in (("serve.api_docs", docs), ("serve.versions", listed)) if not on]
        log.info("listening on %s: hidden by %s (on for a loopback bind)", serve.host, hidden)
    app = FastAPI(
        title="Sonfolio",
        lifespan=lifespan,
        openapi_url="/openapi.json" if docs else None,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.add_middleware(
        UploadLimit, max_bytes=int(serve.max_upload_mb * MB), timeout_s=serve.body_timeout_s
    )
    app.add_middleware(  # outside UploadLimit: a refused request's body is never read
        RequestCaps,
        total=serve.max_requests,
        per_client=serve.max_requests_per_client,
        exempt=frozenset({"/health"}),
    )

    @app.exception_handler(BadInput)
    def _bad_input(_: Request, err: BadInput) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, STATUS[err.kind])

    @app.exception_handler(Busy)
    def _busy(_: Request, err: Busy) -> JSONResponse:
        return JSONResponse(
            {"detail": str(err)}, 503, headers={"Retry-After": str(err.retry_after_s)}
        )

    @app.exception_handler(Exception)
    def _unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": "internal error (logged by the server)"}, 500)

    add_health(app, models, versions() if listed else None)
    add_uploads(app, models, cfg, serve, slots)
    add_engrave(app, serve, slots, lilypond)
    add_page(app)  # last: its headers middleware wraps the other middleware's answers too
    return app


def add_health(app: FastAPI, models: Models, listed: dict[str, str] | None) -> None:
    """GET /health: the models loaded, and `listed` versions unless None. Async: answered on
    the event loop, so a thread pool full of waiting uploads never holds it up."""

    @app.get("/health")
    async def health() -> dict:
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
        return {"status": "ok" if ok else "partial", "models": loaded} | (
            {"versions": listed} if listed is not None else {}
        )


def add_uploads(app: FastAPI, models: Models, cfg: Infer, serve: Serve, slots: DecodeSlots) -> None:
    """POST /read and POST /transcribe: each upload's work estimated and refused over the
    budget (413), then decoded and read inside a decode slot holding its estimated memory,
    `serve.batch_size` systems or chunks a model call (`Shared`: requests take turns)."""
    cfg = cfg.model_copy(update={"batch_size": serve.batch_size})

    @app.post("/read", response_model=None)
    def read(
        file: Annotated[UploadFile, File(description="an image of one staff system or a page")],
        page: bool | None = None,
        format: Literal["json", "text", "ly", "musicxml"] = "json",
    ) -> dict | Response:
        model = models.get("score")
        name = display_name(file.filename or "upload")
        data = file.file.read()
        with slots.take(image_memory(data, name, cfg.score.image)):  # decoded pixels live only here
            image = open_image(data, name, cfg.score.image)
            reading = read_page(model, image, page, cfg, serve.max_staves, name)
            del image
        if format == "ly":
            return PlainTextResponse(read_lilypond([(name, reading)]), media_type="text/x-lilypond")
        if format == "musicxml":  # a system left out is marked in the score where it stood
            xml, _left_out = reading_musicxml([(name, reading)])
            return Response(xml, media_type="application/vnd.recordare.musicxml+xml")
        if format == "text":
            return PlainTextResponse(read_text([(name, reading)]))
        return {"model": model.name, **read_result(name, reading)}

    @app.post("/transcribe")
    def transcribe_upload(
        file: Annotated[UploadFile, File(description="WAV, FLAC, OGG or MP3 audio")],
    ) -> dict:
        model = models.get("speech")
        name = display_name(file.filename or "upload")
        data = file.file.read()
        size = audio_size(data, name, cfg.speech.audio_limits)  # None: open_audio refuses it
        if size is not None:
            check_audio_work(size, name, serve.max_audio_samples)
        with slots.take(len(data) + (size.memory if size else 0)):  # decoded samples: here
            audio = open_audio(data, name, cfg.speech.audio_limits)
            chunks, text = transcribe(model, audio, cfg)
        return {
            "model": model.name,
            **transcript_result(name, audio.size / SAMPLE_RATE, chunks, text),
        }


class EngraveRequest(BaseModel):
    """POST /engrave's body: one system's text and the time signature in force before it (the
    `time` of a system in POST /read's answer)."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="one staff system of canonical LilyPond")
    time: str | None = Field(None, description="N/D, for a system that prints no time")


def add_engrave(app: FastAPI, serve: Serve, slots: DecodeSlots, lilypond: Path | None) -> None:
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
        with slots.take():  # LilyPond takes a slot as a decode does (its memory is its own)
            try:
                svg = engrave.engrave_svg(body.text, body.time, exe)
            except engrave.NotEngravable as err:
                raise HTTPException(422, str(err)) from None
        return Response(
            svg, media_type="image/svg+xml", headers={"Content-Security-Policy": SVG_CSP}
        )
