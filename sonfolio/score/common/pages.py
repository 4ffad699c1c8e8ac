"""Whole pieces engraved as pages with LilyPond's default layout, and where each line fell.

Used by the data stage (page-cut training systems, sonfolio.score.data.page_data) and by
benchmarks/pages.py. LilyPond breaks the lines and pages itself (titles, bar numbers, no time
signature on continuation lines, its own spacing), which a system engraved alone never shows.

Where the lines fell is proven, not guessed: a `page-post-process` hook written into the .ly
prints, for each page, each line's first and last moment (its left and right paper columns'
`when`, whole notes from the start). The lines must tile the music exactly (the first at 0,
each starting where the previous ends, the last at the text's length) and the pages must
match the PNGs written, or `LayoutUnproven` is raised.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from sonfolio.score.common.lilypond import LILYPOND_VERSION

# Printed by LilyPond once page breaking is done: a line per page, then one per system on it,
# with its left and right columns' moments (whole notes from the start of the music).
LAYOUT_HOOK = r"""#(define (sonfolio-layout layout pages)
  (let loop ((ps pages) (k 1))
    (if (pair? ps)
      (begin
        (ly:message "SONFOLIO-PAGE ~a" k)
        (for-each
          (lambda (line)
            (let ((sys (ly:prob-property line 'system-grob #f)))
              (if (ly:grob? sys)
                (ly:message "SONFOLIO-SYSTEM ~a ~a ~a" k
                  (ly:moment-main (ly:grob-property (ly:spanner-bound sys LEFT) 'when))
                  (ly:moment-main (ly:grob-property (ly:spanner-bound sys RIGHT) 'when))))))
          (ly:prob-property (car ps) 'lines '()))
        (loop (cdr ps) (+ k 1))))))
"""
_PAGE = re.compile(r"^SONFOLIO-PAGE (\d+)$", re.MULTILINE)
_SYSTEM = re.compile(r"^SONFOLIO-SYSTEM (\d+) (-?\d+(?:/\d+)?) (-?\d+(?:/\d+)?)$", re.MULTILINE)
PAPERS = ("a4", "letter")


class LayoutUnproven(RuntimeError):
    """LilyPond's layout report does not account for the whole piece, page by page."""


@dataclass(frozen=True)
class Layout:
    """How one piece is set: LilyPond's paper, staff size (pt) and the credits above it."""

    paper: str = "a4"
    staff_size: float = 20.0
    title: str = ""
    composer: str = ""
    indent_mm: float | None = None  # the first line's indent; None: LilyPond's default
    # True: every line fills the width, even a score's only one (which LilyPond leaves at its
    # natural width by default)
    justify: bool = False


@dataclass(frozen=True)
class Page:
    png: Path
    systems: list[tuple[Fraction, Fraction]]  # (start, end) moments of each line


def safe_credit(text: str) -> str:
    """A title or composer reduced to characters that mean nothing to LilyPond or Scheme."""
    return re.sub(r"[^A-Za-z0-9 .,;:'()&!?-]", "", text).strip()[:80]


def document(text: str, layout: Layout) -> str:
    """A .ly of one piece (one canonical text) in LilyPond's default layout, with the hook."""
    if layout.paper not in PAPERS:
        raise ValueError(f"paper {layout.paper!r}: use one of {PAPERS}")
    if "\n" in text:
        raise ValueError("a canonical text is one line; got a newline")
    indent = "" if layout.indent_mm is None else f"indent = {float(layout.indent_mm):.1f}\\mm "
    indent += "ragged-right = ##f " if layout.justify else ""
    credits = "".join(
        f'{key} = "{safe_credit(value)}" '
        for key, value in (("title", layout.title), ("composer", layout.composer))
        if safe_credit(value)
    )
    return (
        f'\\version "{LILYPOND_VERSION}"\n'
        f"#(set-global-staff-size {float(layout.staff_size):.1f})\n"
        f'#(set-default-paper-size "{layout.paper}")\n'
        f"{LAYOUT_HOOK}\\paper {{ page-post-process = #sonfolio-layout {indent}}}\n"
        f"\\header {{ {credits}}}\n"
        f"\\score {{ \\new Staff {{ {text} }} \\layout {{ }} }}\n"
    )


def engrave(
    text: str,
    length: Fraction,
    layout: Layout,
    workdir: Path,
    exe: Path,
    dpi: int,
    timeout_s: float,
) -> list[Page]:
    """PNG pages of the piece (a valid canonical text lasting `length` whole notes), each with
    its lines' moments.

    Raises:
        LayoutUnproven: LilyPond failed, or its report does not tile the piece exactly or
            disagrees with the pages it wrote.
        subprocess.TimeoutExpired: LilyPond ran past `timeout_s`.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "piece.ly").write_text(document(text, layout), encoding="utf-8")
    proc = subprocess.run(
        [str(exe), "-dbackend=cairo", "--png", f"-dresolution={dpi}", "-o", "piece", "piece.ly"],
        capture_output=True, text=True, timeout=timeout_s, cwd=workdir,
    )  # fmt: skip
    if proc.returncode != 0:
        raise LayoutUnproven(f"lilypond failed: {proc.stderr[-500:]}")
    pages = [int(k) for k in _PAGE.findall(proc.stderr)]
    systems: dict[int, list[tuple[Fraction, Fraction]]] = {k: [] for k in pages}
    for k, start, end in _SYSTEM.findall(proc.stderr):
        systems[int(k)].append((Fraction(start), Fraction(end)))
    pngs = sorted(workdir.glob("piece*.png"), key=_page_number)
    if pages != list(range(1, len(pages) + 1)) or len(pngs) != len(pages):
        raise LayoutUnproven(f"{len(pngs)} PNGs for pages {pages}")
    spans = [s for k in pages for s in systems[k]]
    starts_ok = all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    if not spans or spans[0][0] != 0 or spans[-1][1] != length or not starts_ok:
        raise LayoutUnproven(f"systems {spans} do not tile 0..{length}")
    return [Page(png, systems[k]) for png, k in zip(pngs, pages, strict=True)]


def _page_number(png: Path) -> int:
    m = re.search(r"-(?:page)?(\d+)\.png$", png.name)
    return int(m[1]) if m else 0


def join_lines(lines: list[tuple[str, str | None]]) -> str:
    """The inverse of `lines`: one part's lines (text, time in force; in page order) joined back
    into the part's one text. A continuation line's header becomes the changes it makes (a
    clef, key or time other than what the line above leaves in force)."""
    whole = lines[0][0]
    end = _end_state(whole.split(" "), ("", "", lines[0][1]))
    for text, _ in lines[1:]:
        toks = text.split(" ")
        clef, key, n = toks[1], toks[3], 5
        changes = [f"\\clef {clef}"] if clef != end[0] else []
        changes += [f"\\key {key} \\major"] if key != end[1] else []
        if n < len(toks) and toks[n] == "\\time":
            changes += [f"\\time {toks[n + 1]}"] if toks[n + 1] != end[2] else []
            n += 2
        if toks[n : n + 2] == ["\\bar", '".|:"']:  # the start repeat of the bar line above
            n += 2
            if whole.endswith(' \\bar ":|."'):
                whole = whole[: -len('":|."')] + '":..:"'
            else:
                whole += ' \\bar ".|:"'
        whole = " ".join([whole, "|", *changes, *toks[n:]])
        end = _end_state(toks, end)  # each line is scanned once
    return whole


def _end_state(toks: list[str], start: tuple[str, str, str | None]) -> tuple[str, str, str | None]:
    """(clef, key tonic, time) in force after the tokens of a valid text, from `start`."""
    clef, key, time = start
    for i, tok in enumerate(toks[:-1]):
        if tok == "\\clef":
            clef = toks[i + 1]
        elif tok == "\\key":
            key = toks[i + 1]
        elif tok == "\\time":
            time = toks[i + 1]
    return clef, key, time
