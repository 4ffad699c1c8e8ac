"""The params sections `infer` and `serve`: `sonfolio read`, `transcribe` and the service."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sonfolio.config.base import Positive, Strict


class PageSplit(Strict):
    """Cutting a page image into staff systems (sonfolio/infer/page.py)."""

    staff_line_fraction: Annotated[float, Field(gt=0.0, le=1.0)]  # of the ink's width
    min_staff_lines: Annotated[int, Field(ge=1, le=16)]  # lines in a group to count as a staff
    max_skew_deg: Annotated[float, Field(ge=0.0, le=10.0)]  # tilt straightened before cutting


class AudioChunks(Strict):
    """Cutting long audio into windows the speech model takes (sonfolio/infer/audio.py)."""

    search_s: Annotated[float, Field(gt=0.0)]  # the quietest point this close to the limit
    silence_db: Annotated[float, Field(lt=0.0)]  # dB below the clip's loudest frame
    overlap_s: Annotated[float, Field(ge=0.0)]  # chunks cut outside a silence overlap this much


class Infer(Strict):
    """`sonfolio read`, `sonfolio transcribe` and the service (docs/inference.md)."""

    variant: Annotated[str, Field(min_length=1)]  # default exported variant folder name
    score_max_tokens: Positive  # greedy decoding limit per system
    speech_max_tokens: Positive  # greedy decoding limit per audio chunk
    batch_size: Positive  # systems or chunks per generate call
    page: PageSplit
    audio: AudioChunks


class Serve(Strict):
    """`sonfolio serve`: where it listens and what it accepts."""

    host: Annotated[str, Field(min_length=1)]
    port: Annotated[int, Field(ge=1, le=65535)]
    max_upload_mb: Annotated[float, Field(gt=0.0)]  # larger uploads get 413
