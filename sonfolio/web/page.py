"""The page at `/`: its three files, served by the app itself, and the headers that confine it.

Everything the page needs is package data of sonfolio.web (index.html, app.js, style.css): no
CDN, no font, no script from elsewhere, so it works offline. Every response (the page's, the
API's, the engravings') says `X-Content-Type-Options: nosniff`, and all but FastAPI's own
/docs pages (which load from a CDN) carry a Content-Security-Policy that allows this origin
only: no inline script, no eval, no plugin, no framing. The page shows data only as text
(`textContent`), so a file name or a model's text cannot become markup; the CSP is the second
line should that ever slip.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

CSP = "; ".join(
    [
        "default-src 'self'",
        "img-src 'self' blob: data:",  # blob: the uploaded page and the engravings
        "media-src 'self' blob:",  # blob: the chosen audio file, played in place
        "style-src 'self'",
        "script-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
# An engraving opened on its own: its inline styles draw it, nothing in it may run or load.
SVG_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}


class SecurityHeaders:
    """ASGI middleware: nosniff and a no-referrer policy on every response, and `CSP` on every
    response that sets none of its own, except on the paths in `exempt` (FastAPI's /docs)."""

    def __init__(self, app: Any, exempt: frozenset[str]) -> None:
        self.app, self.exempt = app, exempt

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
        if scope["path"] not in self.exempt:
            extra.append((b"content-security-policy", CSP.encode()))

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                have = {name.lower() for name, _ in headers}
                headers += [(k, v) for k, v in extra if k not in have]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def add_page(app: FastAPI) -> None:
    """Serve the page at `/` and its script and style at /web/, with `SecurityHeaders` on all
    of `app` (add it after the other middleware: the last added wraps the rest)."""
    body = {name: files("sonfolio.web").joinpath(name).read_bytes() for name in ASSETS}

    def route(name: str) -> Any:
        def get() -> Response:
            # no-cache: a browser revalidates, so an upgraded service never runs old script
            headers = {"Cache-Control": "no-cache"}
            return Response(body[name], media_type=ASSETS[name], headers=headers)

        return get

    app.add_api_route("/", route("index.html"), methods=["GET"], include_in_schema=False)
    for name in ("app.js", "style.css"):
        app.add_api_route(f"/web/{name}", route(name), methods=["GET"], include_in_schema=False)
    docs = (app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
    app.add_middleware(SecurityHeaders, exempt=frozenset(p for p in docs if p))
