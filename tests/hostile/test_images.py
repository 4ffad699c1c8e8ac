"""Hostile and careless images: sizes checked from the header, every pixel mode read as grey
with its content kept, several frames refused, and the straightened page held to the limit.

Every input is made here, in memory or under tmp_path: nothing is committed.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image, ImageDraw

from sonfolio.config.infer import ImageLimits
from sonfolio.infer.inputs import BadInput, open_image
from sonfolio.score.common.page import deskew, turned_size

ROOT = Path(__file__).resolve().parents[2]
INK, PAPER = 0.1, 0.9  # shares of a mode's range: dark notes on light paper


def page(shape: tuple[int, int] = (120, 200)) -> np.ndarray:
    """(H, W) float in [0, 1]: light paper with a dark bar across the middle third."""
    pixels = np.full(shape, PAPER, dtype=np.float64)
    pixels[shape[0] // 3 : 2 * shape[0] // 3, 20:-20] = INK
    return pixels


def encode(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def assert_page_survives(gray: Image.Image) -> None:
    """The bar is dark and the paper light, as in `page()`: content read, not clipped away."""
    assert gray.mode == "L"
    pixels = np.asarray(gray).astype(int)
    expected = np.rint(page(pixels.shape) * 255)
    assert np.abs(pixels - expected).max() <= 3, "the grey levels are not those of the page"


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height (8-bit grey) over one tiny, damaged data chunk:
    decoding it would fail as "damaged", so a size error proves no pixel was decoded."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def limits(params) -> ImageLimits:
    return params.infer.score.image


def test_a_header_over_max_pixels_is_refused_before_decoding(limits):
    side = int(limits.max_pixels**0.5) + 10  # just over the limit, under Pillow's own
    with pytest.raises(BadInput) as caught:
        open_image(png_claiming(side, side), "big.png", limits)
    assert caught.value.kind == "too_large"
    message = str(caught.value)
    assert f"{side * side:,} pixels" in message
    assert "infer.score.image.max_pixels" in message and f"{limits.max_pixels:,}" in message


def test_a_header_past_pillows_bomb_limit_names_the_param(limits):
    with pytest.raises(BadInput) as caught:
        open_image(png_claiming(60_000, 60_000), "bomb.png", limits)  # 3.6 G pixels
    assert caught.value.kind == "too_large"
    assert "infer.score.image.max_pixels" in str(caught.value)


def test_a_strip_over_max_aspect_is_refused(limits):
    strip = Image.new("L", (int(limits.max_aspect * 10) + 10, 10), 255)
    with pytest.raises(BadInput) as caught:
        open_image(encode(strip, "PNG"), "strip.png", limits)
    assert caught.value.kind == "limit"
    assert "infer.score.image.max_aspect" in str(caught.value)


def test_the_limits_come_from_params(limits):
    img = encode(Image.new("L", (100, 100), 255), "PNG")
    assert open_image(img, "ok.png", limits).size == (100, 100)
    with pytest.raises(BadInput, match="9,999"):
        open_image(img, "ok.png", limits.model_copy(update={"max_pixels": 9_999}))


@pytest.mark.parametrize("fmt", ["TIFF", "PNG"])
def test_a_16_bit_scan_keeps_its_content(limits, fmt):
    sixteen = Image.fromarray(np.rint(page() * 65535).astype(np.uint16))
    data = encode(sixteen, fmt)
    assert Image.open(io.BytesIO(data)).mode.startswith("I;16")  # really 16-bit on disk
    assert_page_survives(open_image(data, f"scan.{fmt.lower()}", limits))


def test_float_and_32_bit_pixels_keep_their_content(limits):
    as_float = Image.fromarray(page().astype(np.float32), "F")
    assert_page_survives(open_image(encode(as_float, "TIFF"), "f.tif", limits))
    as_int = Image.fromarray(np.rint(page() * 65535).astype(np.int32), "I")
    assert_page_survives(open_image(encode(as_int, "TIFF"), "i.tif", limits))


@pytest.mark.parametrize("mode", ["RGB", "CMYK", "P", "1", "LAB"])
def test_colour_modes_read_as_grey(limits, mode):
    gray = Image.fromarray(np.rint(page() * 255).astype(np.uint8), "L")
    img = gray.convert("RGB").convert(mode) if mode != "LAB" else gray.convert("RGB")
    if mode == "LAB":
        img = Image.merge(
            "LAB", (gray, Image.new("L", gray.size, 128), Image.new("L", gray.size, 128))
        )
    data = encode(img, "TIFF")
    out = np.asarray(open_image(data, f"{mode}.tif", limits)).astype(int)
    dark, light = out[60, 100], out[5, 5]
    assert dark < 64 and light > 192, (mode, dark, light)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_transparent_pixels_become_white_paper(limits, mode):
    rgba = np.zeros((40, 40, 4), dtype=np.uint8)  # black, fully transparent ...
    rgba[10:30, 10:30] = (0, 0, 0, 255)  # ... but an opaque black square
    img = Image.fromarray(rgba, "RGBA")
    if mode == "LA":
        img = img.convert("LA")
    elif mode == "P":
        img = img.convert("P", palette=Image.Palette.ADAPTIVE)
        img.info["transparency"] = img.getpixel((0, 0))
    out = np.asarray(open_image(encode(img, "PNG"), "t.png", limits))
    assert out[0, 0] == 255 and out[20, 20] == 0


def test_an_animated_gif_is_refused_not_read_as_its_first_frame(limits):
    frames = [Image.new("L", (50, 50), shade) for shade in (0, 128, 255)]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    with pytest.raises(BadInput) as caught:
        open_image(data, "anim.gif", limits)
    assert caught.value.kind == "unsupported" and "several frames" in str(caught.value)
    assert open_image(encode(frames[0], "GIF"), "still.gif", limits).size == (50, 50)


def test_a_multi_page_tiff_is_refused(limits):
    pages = [Image.new("L", (50, 50), 255), Image.new("L", (50, 50), 0)]
    data = encode(pages[0], "TIFF", save_all=True, append_images=pages[1:])
    with pytest.raises(BadInput, match="several frames.*own image"):
        open_image(data, "book.tif", limits)


def tilted_staff(size: tuple[int, int], angle: float) -> Image.Image:
    """A grey page with one five-line staff, turned by `angle` degrees (size kept)."""
    img = Image.new("L", size, 255)
    draw = ImageDraw.Draw(img)
    for i in range(5):
        y = size[1] // 2 - 40 + 20 * i
        draw.line((20, y, size[0] - 20, y), fill=0, width=2)
    return img.rotate(angle, Image.Resampling.BICUBIC, expand=False, fillcolor=255)


def test_turned_size_is_what_pillow_makes():
    img = Image.new("L", (640, 300), 255)
    for angle in (0.7, -1.5, 2.0, 9.0):
        made = img.rotate(angle, expand=True).size
        predicted = turned_size(img.size, angle)
        assert all(abs(p - m) <= 1 for p, m in zip(predicted, made, strict=True)), angle


def test_a_page_the_straightening_enlarges_past_the_limit_is_refused(limits):
    img = tilted_staff((640, 300), 1.5)
    level, angle = deskew(img, 2.0, limits)
    assert abs(angle) > 1.0 and level.size != img.size  # the tilt is found and undone
    exact = limits.model_copy(update={"max_pixels": img.width * img.height})
    with pytest.raises(BadInput) as caught:
        deskew(img, 2.0, exact)
    message = str(caught.value)
    assert caught.value.kind == "too_large"
    assert "after straightening" in message and "infer.score.image.max_pixels" in message


def test_sonfolio_read_names_the_limit_and_exits_2(tmp_path, capsys):
    from sonfolio.cli import main

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["infer"]["score"]["image"]["max_pixels"] = 5_000
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw), encoding="utf-8")
    image = tmp_path / "scan.png"
    image.write_bytes(encode(Image.new("L", (100, 100), 255), "PNG"))
    assert main(["read", str(image), "--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert "infer.score.image.max_pixels is 5,000" in err and "Traceback" not in err
