"""The HTTP service: POST /read (a score image), POST /transcribe (audio), GET /health.

`sonfolio serve` runs it with uvicorn on 127.0.0.1 (params.yaml `serve`); docs/inference.md has
the endpoints and curl examples. `create_app` takes each model as a loaded variant or as a
folder, which the app's lifespan loads once at startup. Uploads larger than
`serve.max_upload_mb` get 413 before their body is read past the limit; an upload that is not an
image (or not audio) gets 415, a damaged or empty one 400, each with a message that says so.
No error response carries a traceback: unexpected errors are logged here and answered with 500.
"""

from __future__ import annotations

import logging
import platform
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import FastAPI, File, HTTPException, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse

from sonfolio.infer.formats import read_lilypond, read_result, read_text, transcript_result
from sonfolio.infer.inputs import BadInput, open_audio, open_image
from sonfolio.infer.run import TRACK_FLAG, check_fit, load_model, read_image, transcribe
from sonfolio.speech.audio import SAMPLE_RATE
from sonfolio.variants import Variant

if TYPE_CHECKING:
    from sonfolio.config.infer import Infer

log = logging.getLogger(__name__)

STATUS = {"unsupported": 415, "missing": 400, "corrupt": 400, "empty": 400}


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
            raise HTTPException(
                503, f"no {track} model is loaded: restart with {TRACK_FLAG[track]} FOLDER"
            )
        return self.loaded[track], self.locks[track]


class UploadLimit:
    """ASGI middleware: 413 for a request body over `max_bytes`, read no further than that.

    A declared Content-Length over the limit is refused before any of the body is read; a body
    without one (chunked) is counted as it arrives and refused once it passes the limit.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

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
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise self._too_large()  # FastAPI passes HTTPException through body parsing
            return message

        await self.app(scope, counted, send)


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
    max_upload_mb: float,
    score: Variant | Path | None,
    speech: Variant | Path | None,
    threads: int | None = None,
    device: str = "auto",
) -> FastAPI:
    """The service. `score` / `speech`: a loaded variant, a folder to load at startup, or None
    (that endpoint then answers 503)."""
    models = Models({"score": score, "speech": speech}, threads, device)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        models.load(cfg)  # once, before the first request
        yield

    app = FastAPI(title="Sonfolio", lifespan=lifespan)
    app.add_middleware(UploadLimit, max_bytes=int(max_upload_mb * 1024 * 1024))

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
        format: Literal["json", "text", "ly"] = "json",
    ) -> dict | PlainTextResponse:
        variant, lock = models.get("score")
        name = file.filename or "upload"
        image = open_image(file.file.read(), name)
        with lock:
            reading = read_image(variant, image, page, cfg)
        if format == "ly":
            return PlainTextResponse(read_lilypond([(name, reading)]), media_type="text/x-lilypond")
        if format == "text":
            return PlainTextResponse(read_text([(name, reading)]))
        return {"model": variant.name, **read_result(name, reading)}

    @app.post("/transcribe")
    def transcribe_upload(
        file: Annotated[UploadFile, File(description="WAV, FLAC, OGG or MP3 audio")],
    ) -> dict:
        variant, lock = models.get("speech")
        name = file.filename or "upload"
        audio = open_audio(file.file.read(), name)
        with lock:
            chunks, text = transcribe(variant, audio, cfg)
        return {
            "model": variant.name,
            **transcript_result(name, audio.size / SAMPLE_RATE, chunks, text),
        }

    return app
