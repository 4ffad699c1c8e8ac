"""One staff system's text engraved by LilyPond as SVG, for the page's POST /engrave.

LilyPond input can run Scheme (`#(system ...)`, `$(...)`), read files (`\\include`) or loop for
hours, so a text reaches LilyPond only when it passes the canonical grammar gate that the eval
uses (sonfolio.score.eval.compile_check.check_grammar: every rule but bar lengths, which are
harmless LilyPond), and it is written as `read --format ly` writes it (`lilypond_text` in the
project's `document`). LilyPond runs in a fresh temporary folder with a timeout.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from sonfolio.score.common.canonical import time_measure
from sonfolio.score.common.lilypond import document
from sonfolio.score.eval.compile_check import check_grammar, lilypond_text

# These move to params.yaml `serve` (with the pipeline's next rerun); constants until then.
# A system of infer.score.max_tokens (256) tokens is well under 4,000 characters.
MAX_TEXT_CHARS = 4000
TIMEOUT_S = 30.0  # one system takes LilyPond ~0.3 s; the rest is room for a loaded machine

_ERROR = re.compile(r"\.ly:\d+:\d+: error: (.*)$", re.MULTILINE)


class NotEngravable(ValueError):
    """The text is refused before LilyPond sees it, or LilyPond could not engrave it."""


def refusal(text: str, time: str | None) -> str | None:
    """Why `text` (read in the time in force `time`) may not go to LilyPond; None when it may."""
    if len(text) > MAX_TEXT_CHARS:
        return f"the text has {len(text)} characters, over the limit of {MAX_TEXT_CHARS}"
    if time is not None:
        try:
            time_measure(time)
        except ValueError as err:
            return str(err)
    why = check_grammar(text, time)
    return None if why is None else f"not canonical LilyPond: {why}"


def engrave_svg(text: str, time: str | None, exe: Path, timeout_s: float = TIMEOUT_S) -> str:
    """The SVG of one system engraved by LilyPond (cropped around the staff, glyphs as paths).

    Raises:
        NotEngravable: the text fails `refusal`, or LilyPond failed or ran past `timeout_s`.
    """
    why = refusal(text, time)
    if why is not None:
        raise NotEngravable(why)
    with tempfile.TemporaryDirectory(prefix="sonfolio-engrave-") as tmp:
        src = Path(tmp) / "system.ly"
        src.write_text(document([lilypond_text(text, time)]), encoding="utf-8")
        # cairo's SVG draws glyphs as paths: the image needs no font from anywhere
        cmd = [str(exe), "-dwarning-as-error=#f", "-dbackend=cairo", "--svg", "-o", "system"]
        try:
            proc = subprocess.run(
                [*cmd, src.name], capture_output=True, text=True, timeout=timeout_s, cwd=tmp
            )
        except subprocess.TimeoutExpired:
            raise NotEngravable(f"LilyPond ran past {timeout_s:g} s on this text") from None
        pages = sorted(Path(tmp).glob("system*.svg"))
        if proc.returncode != 0 or len(pages) != 1:
            errors = "; ".join(_ERROR.findall(proc.stderr)) or f"{len(pages)} pages written"
            raise NotEngravable(f"LilyPond could not engrave this text: {errors}")
        return pages[0].read_text(encoding="utf-8")
