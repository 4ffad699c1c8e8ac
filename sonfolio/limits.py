"""Refusals of inputs that cannot be used (missing, over a limit of params.yaml), shared by
the tracks' signal code (the page cutter checks every image it makes, the image decoder every
file) and the app's inputs (sonfolio.infer.inputs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sonfolio.config.infer import ImageLimits


class BadInput(ValueError):
    """An input that cannot be used.

    Attributes:
        kind: "missing" (no such file), "unsupported" (not an image / not audio), "corrupt"
            (the right kind of file, but undecodable), "empty" (nothing in it), "too_large"
            (over a size limit of params.yaml) or "limit" (over another limit, e.g. a shape).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_image_size(
    size: tuple[int, int], name: str, limits: ImageLimits, after: str = ""
) -> None:
    """Refuse an image over infer.score.image's pixel count or aspect ratio. `after`: the transform
    that made this size ("after straightening by 2.0 degrees"), for the message.

    Raises:
        BadInput: "too_large" over max_pixels, "limit" over max_aspect, "empty" with no pixels.
    """
    width, height = size
    what = f"{name} {after}".rstrip()
    if width < 1 or height < 1:
        raise BadInput("empty", f"{what} has no pixels ({width} x {height})")
    if width * height > limits.max_pixels:
        raise BadInput(
            "too_large",
            f"{what} is {width:,} x {height:,} = {width * height:,} pixels; "
            f"infer.score.image.max_pixels is {limits.max_pixels:,}: scale the image down, or "
            "raise it in params.yaml",
        )
    aspect = max(width, height) / min(width, height)
    if aspect > limits.max_aspect:
        raise BadInput(
            "limit",
            f"{what} is {width:,} x {height:,}, {aspect:.0f} times longer than wide; "
            f"infer.score.image.max_aspect is {limits.max_aspect:g}: crop it, or raise it in "
            "params.yaml",
        )


def read_input(source: bytes | Path, name: str) -> bytes:
    """The bytes of an upload, or of a file (BadInput "missing" when there is none)."""
    if isinstance(source, bytes):
        return source
    if not source.is_file():
        raise BadInput("missing", f"{name}: no such file (check the path)")
    try:
        return source.read_bytes()
    except OSError as err:
        raise BadInput(
            "missing", f"{name}: cannot be read ({err.strerror}): check its permissions"
        ) from None
