"""The params section `serve`: `sonfolio serve`, the HTTP service (docs/inference.md).

Its own module, imported by the app alone (and by `Params`, the whole-file check): no pipeline
stage reads `serve`, so an edit to this schema reruns none (sonfolio/config/infer.py is every
reading stage's).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sonfolio.config.base import Strict

# Who is shown what the service would rather keep to its own machine: `always`, `never`, or
# `loopback`: only while it listens on a loopback address (127.0.0.1, ::1, localhost).
Exposure = Literal["always", "loopback", "never"]


class Serve(Strict):
    """`sonfolio serve`: where it listens, what it accepts and how much work one request may
    ask for (docs/security.md)."""

    host: Annotated[str, Field(min_length=1)]
    port: Annotated[int, Field(ge=1, le=65535)]
    max_upload_mb: Annotated[float, Field(gt=0.0)]  # larger uploads get 413
    # Uploads (and engravings) decoded and read at once...
    max_concurrent_decodes: Annotated[int, Field(ge=1)]
    # ... within this estimated memory together (an image ~7 bytes a pixel, from its header);
    # one that does not fit waits for another to finish, one larger than all of it runs alone
    decode_memory_mb: Annotated[float, Field(gt=0.0)]
    busy_timeout_s: Annotated[float, Field(gt=0.0)]  # a request waits this long for a slot: 503
    # systems or audio chunks per model call: requests take turns on a model call by call, so
    # a long request lets the others' calls in between (infer.batch_size is the CLI's)
    batch_size: Annotated[int, Field(ge=1)]
    max_staves: Annotated[int, Field(ge=1)]  # staves found on one image (each one read): 413
    # samples decoded from one audio file, seconds x channels x rate from its header: 413
    max_audio_samples: Annotated[int, Field(ge=1)]
    header_timeout_s: Annotated[float, Field(gt=0.0)]  # a request's headers, from the connection
    body_timeout_s: Annotated[float, Field(gt=0.0)]  # a request's whole body: 408 after it
    max_header_kb: Annotated[int, Field(ge=1)]  # uvicorn's h11_max_incomplete_event_size
    keep_alive_s: Annotated[int, Field(ge=1)]  # idle connections closed after this
    # requests in flight (headers in, answer not sent; an open socket is none): 503 beyond
    max_requests: Annotated[int, Field(ge=1)]
    max_requests_per_client: Annotated[int, Field(ge=1)]  # from one client address: 429 beyond
    versions: Exposure  # /health lists the Python and library versions
    api_docs: Exposure  # /docs, /redoc and /openapi.json are served
