"""Side-by-side images of one system: the input image, a render of the prediction (or a panel
saying it does not compile, and why), and a render of the truth, stacked with a caption each."""

from __future__ import annotations

import textwrap
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

CAPTION_PX = 18  # height of a caption strip
MARGIN_PX = 6
MIN_WIDTH_PX = 400  # so a caption and a failure message fit beside a short system


def _panel(img: Image.Image, caption: str, width: int) -> Image.Image:
    out = Image.new("L", (width, CAPTION_PX + img.height + MARGIN_PX), 255)
    draw = ImageDraw.Draw(out)
    draw.rectangle((0, 0, width, CAPTION_PX - 2), fill=225)
    draw.text((4, 3), caption, fill=0, font=ImageFont.load_default())
    out.paste(img, (0, CAPTION_PX))
    return out


def _message(text: str, width: int) -> Image.Image:
    lines = textwrap.wrap(text, width=max(20, width // 7))[:4]
    img = Image.new("L", (width, 16 * len(lines) + 12), 255)
    draw = ImageDraw.Draw(img)
    for k, line in enumerate(lines):
        draw.text((6, 6 + 16 * k), line, fill=0, font=ImageFont.load_default())
    return img


def _grey(path: Path) -> Image.Image:
    with Image.open(path) as img:
        return img.convert("L")


def side_by_side(
    source: Path,
    prediction_png: Path | None,
    truth_png: Path | None,
    captions: tuple[str, str, str],
    failure: str,
    dest: Path,
) -> None:
    """Write one PNG: input, prediction, truth, top to bottom (a render missing shows
    `failure` or "no render" instead)."""
    images = [_grey(source)]
    images += [_grey(p) if p is not None else None for p in (prediction_png, truth_png)]
    width = max([MIN_WIDTH_PX] + [im.width for im in images if im is not None])
    images[1] = images[1] or _message(f"does not compile: {failure}", width)
    images[2] = images[2] or _message("the truth did not render", width)
    panels = [_panel(im, cap, width) for im, cap in zip(images, captions, strict=True)]
    sheet = Image.new("L", (width, sum(p.height for p in panels)), 255)
    top = 0
    for p in panels:
        sheet.paste(p, (0, top))
        top += p.height
    dest.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(dest, compress_level=1)
