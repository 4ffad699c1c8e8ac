"""Page-cut training systems: a piece engraved as pages, cut as `read --page` cuts, each line
stored with exactly the text it shows.

A system engraved alone shows its clef, key and time and nothing else; a line of a real page
shows LilyPond's own line breaking and spacing, a bar number, no time signature after the
first line, a title above the first line. So a share of the pieces (score_data.pages) is also
engraved whole, in LilyPond's default layout at a drawn paper and staff size, and cut by the
page cutter (sonfolio.score.common.page, with score_data.pages.cut = infer.score.page's settings).

Which bars landed on which line is proven, not guessed: sonfolio.score.common.pages reports each
line's first and last moment from LilyPond's own layout, and every line must start and end on
a bar line of the text. The text is then cut at those bars (`lines`): each line's header says
what it prints (clef and key always, the time only on the first line or where it changes) and
carries the time in force otherwise. A tie across a line break would be drawn as a half tie
with no note to claim it, so such ties are removed and the piece engraved again; the second
layout must break at the same bars. A page whose cut does not give one box per reported line
is dropped, and so is a piece whose layout cannot be proven; each is counted by reason.
"""

from __future__ import annotations

import hashlib
import logging
import random
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from sonfolio.score.common.canonical import CanonicalError, bar_lengths, validate
from sonfolio.score.common.lexicon import BAR_TYPES, MARKINGS, SLUR_END, SLUR_START
from sonfolio.score.common.page import cut_page
from sonfolio.score.common.pages import Layout, LayoutUnproven, engrave
from sonfolio.score.data.render import RenderSettings, finish

if TYPE_CHECKING:
    from sonfolio.config.data import ScorePages

log = logging.getLogger(__name__)

_ARITY = {"\\clef": 1, "\\key": 2, "\\time": 1}  # change commands and their arguments
# Credits drawn for pieces with a title: LilyPond sets them above the first line, where the
# page cutter must leave them out.
_TITLES = ("Air", "Reel", "Chorale", "Menuet", "Prelude", "Song", "Dance", "Study", "Hymn")
_COMPOSERS = ("Trad.", "Anon.", "J. S. Bach", "arr. Sonfolio", "after an old tune")


@dataclass(frozen=True)
class Line:
    """One line of a page: its canonical text, the time in force when its header prints none,
    and its first bar's number (a pickup bar is bar 0)."""

    text: str
    time: str | None
    bar: int


@dataclass(frozen=True)
class PageJob:
    """One part of a piece to engrave as pages."""

    piece: str
    text: str  # the whole part as one canonical text (its header prints the time)
    layout: Layout
    dest: Path  # images go to dest / f"{stem}-{k:03d}.png"
    stem: str
    augment: bool  # the train split's images are degraded (seeded per image)
    engraver: str = "lilypond"  # or "verovio:<font>": Verovio lays the pages out


@dataclass
class PageResult:
    """What one part gave: its lines' images (paths under the job's dest) and texts."""

    images: list[Path] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class _Bars:
    """A valid text taken apart: its header, its bars' tokens, and what is in force."""

    head: list[str]  # the header as written (clef, key, maybe time and \partial)
    bars: list[list[str]]  # each bar's tokens, its leading changes included
    pickup: bool
    clef: list[str]  # per bar: the clef in force at its first event
    key: list[str]  # per bar: the key tonic in force
    time: list[str]  # per bar: the time in force
    time_printed: list[bool]  # per bar: a \time opens it (the header's, for bar 0)


def take_apart(text: str) -> _Bars:
    """The bars of a valid canonical text whose header states its time."""
    toks = text.split(" ")
    clef, key = toks[1], toks[3]
    n = 5
    if toks[n] != "\\time":
        raise ValueError("a piece's text must open with its time signature")
    time = toks[n + 1]
    n += 2
    pickup = toks[n] == "\\partial"
    if pickup:
        n += 2
    head, body = toks[:n], toks[n:]
    bars: list[list[str]] = [[]]
    for tok in body:
        if tok == "|":
            bars.append([])
        else:
            bars[-1].append(tok)
    clefs, keys, times, printed = [], [], [], []
    for b, bar in enumerate(bars):
        k, opened = (_leading(bar) if b else 0), b == 0
        for i, tok in enumerate(bar[:k]):  # the changes that open the bar
            if tok == "\\clef":
                clef = bar[i + 1]
            elif tok == "\\key":
                key = bar[i + 1]
            elif tok == "\\time":
                time, opened = bar[i + 1], True
        clefs.append(clef)
        keys.append(key)
        times.append(time)
        printed.append(opened)
        for i, tok in enumerate(bar[k:], k):  # a clef change inside the bar holds after it
            if tok == "\\clef":
                clef = bar[i + 1]
    return _Bars(head, bars, pickup, clefs, keys, times, printed)


def _leading(bar: list[str]) -> int:
    """How many tokens of `bar` are changes at its start."""
    k = 0
    while k < len(bar) and bar[k] in _ARITY:
        k += 1 + _ARITY[bar[k]]
    return k


_AFTER_EVENT = frozenset(("}", "\\bar", *MARKINGS, *BAR_TYPES))


def _last_event(bar: list[str]) -> int:
    """Index of the bar's last event token (a closing tuplet brace, its markings and a bar
    line skipped)."""
    k = len(bar) - 1
    while k > 0 and bar[k] in _AFTER_EVENT:
        k -= 1
    return k


def untied(parts: _Bars, counts: list[int]) -> tuple[str, int]:
    """The whole text with every tie and slur across a line break removed, and how many that
    removed (LilyPond would draw them as open halves the lines' texts cannot claim): the tie
    at the end of every line but the last, and a slur begun on one line and ended on another
    (both its ends)."""
    bars = [list(b) for b in parts.bars]
    removed, end = 0, 0
    for n in counts[:-1]:
        end += n
        last = bars[end - 1]
        k = _last_event(last)
        if last[k].endswith("~"):
            last[k] = last[k][:-1]
            removed += 1
    line_of = [line for line, n in enumerate(counts) for _ in range(n)]
    opened: tuple[int, int, int] | None = None  # (line, bar, token) of an open slur's "("
    for b, bar in enumerate(bars):
        for i, tok in enumerate(bar):
            if tok == SLUR_START:
                opened = (line_of[b], b, i)
            elif tok == SLUR_END and opened is not None:
                if opened[0] != line_of[b]:
                    bars[opened[1]][opened[2]] = bar[i] = ""
                    removed += 1
                opened = None
    text = " | ".join(" ".join(t for t in b if t) for b in bars)
    return " ".join(parts.head + text.split(" ")), removed


def _break_bar_lines(bars: list[list[str]], counts: list[int]) -> list[bool]:
    """Move the start repeats at line breaks to where a page prints them: `\\bar ".|:"` before
    the `|` that ends a line opens the next line instead, and `":..:"` there becomes `":|."`
    at the line's end and `".|:"` at the next line's start. Edits `bars` in place; returns,
    per line, whether it opens with a start repeat."""
    opens = [False] * len(counts)
    end = 0
    for line, n in enumerate(counts[:-1]):
        end += n
        last = bars[end - 1]
        if len(last) >= 2 and last[-2] == "\\bar" and last[-1] in ('".|:"', '":..:"'):
            opens[line + 1] = True
            if last[-1] == '".|:"':
                del last[-2:]
            else:
                last[-1] = '":|."'
    return opens


def lines(text: str, counts: list[int]) -> list[Line]:
    """`text` (a valid piece whose header states its time) cut into lines of `counts` bars,
    each headed as a page prints it. The text must hold no tie at a line's end (`untied`)."""
    parts = take_apart(text)
    if sum(counts) != len(parts.bars) or min(counts) < 1:
        raise ValueError(f"line bar counts {counts} do not cover {len(parts.bars)} bars")
    bars = [list(b) for b in parts.bars]
    opens = _break_bar_lines(bars, counts)
    out, start = [], 0
    for n, repeat in zip(counts, opens, strict=True):
        seg = bars[start : start + n]
        if start == 0:
            head, first = parts.head, seg[0]
            time = None
        else:
            head = [f"\\clef {parts.clef[start]}", f"\\key {parts.key[start]} \\major"]
            time = None if parts.time_printed[start] else parts.time[start]
            if time is None:
                head.append(f"\\time {parts.time[start]}")
            first = seg[0][_leading(seg[0]) :]
            if repeat:
                first = ["\\bar", '".|:"', *first]
        body = " | ".join(" ".join(b) for b in [first, *seg[1:]])
        number = start if parts.pickup else start + 1
        out.append(Line(" ".join([*head, body]), time, number))
        start += n
    return out


def line_counts(spans: list[tuple[Fraction, Fraction]], lengths: list[Fraction]) -> list[int]:
    """Bars per line from LilyPond's line spans (moments) and the text's bar lengths.

    Raises:
        LayoutUnproven: a line does not start and end on a bar line of the text.
    """
    ends = {Fraction(0): 0}
    at = Fraction(0)
    for k, length in enumerate(lengths, 1):
        at += length
        ends[at] = k
    counts = []
    for start, end in spans:
        if start not in ends or end not in ends or ends[end] <= ends[start]:
            raise LayoutUnproven(f"a line from {start} to {end} does not fall on bar lines")
        counts.append(ends[end] - ends[start])
    return counts


def layout_for(piece: str, cfg: ScorePages, seed: int, title: str) -> Layout:
    """The paper, staff size and credits drawn for `piece` (the same for the same seed)."""
    rng = random.Random(f"{seed}/pages/{piece}")
    credits = rng.random() < cfg.credits_fraction
    return Layout(
        paper=rng.choice(cfg.papers),
        staff_size=rng.choice(cfg.staff_sizes),
        title=(title or rng.choice(_TITLES)) if credits else "",
        composer=rng.choice(_COMPOSERS) if credits else "",
    )


def chosen(piece: str, fraction: float, seed: int) -> bool:
    """Whether `piece` is engraved as pages too (a seeded share of the pieces)."""
    digest = hashlib.sha256(f"{seed}/pages/{piece}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def page_systems(
    job: PageJob, cfg: ScorePages, exe: Path, render: RenderSettings, seed: int
) -> PageResult:
    """Engrave `job`'s part as pages, cut them, and write each proven line's image; never
    raises for a piece that cannot be used (counted in `dropped`)."""
    result = PageResult()
    lengths = bar_lengths(job.text)
    if len(lengths) > cfg.max_bars:
        result.dropped["page_too_long"] += 1
        return result
    if job.engraver != "lilypond":
        return _verovio_pages(job, cfg, render, seed, result)
    total = sum(lengths, Fraction(0))
    with tempfile.TemporaryDirectory(prefix="sonfolio-page-") as tmp:
        try:
            pages = engrave(
                job.text, total, job.layout, Path(tmp) / "a", exe, cfg.dpi, cfg.timeout_s
            )
            counts = line_counts([s for p in pages for s in p.systems], lengths)
            text, removed = untied(take_apart(job.text), counts)
            if removed:  # engrave again without the ties across line breaks
                pages = engrave(
                    text, total, job.layout, Path(tmp) / "b", exe, cfg.dpi, cfg.timeout_s
                )
                if line_counts([s for p in pages for s in p.systems], lengths) != counts:
                    result.dropped["page_layout_changed"] += 1
                    return result
        except (LayoutUnproven, subprocess.TimeoutExpired) as err:
            log.debug("%s: layout not proven: %s", job.piece, err)
            result.dropped["page_layout_unproven"] += 1
            return result
        grays = []
        for page in pages:
            with Image.open(page.png) as raw:
                grays.append(raw.convert("L"))
        return _cut_pages(job, cfg, render, seed, result, lines(text, counts), grays,
                          [len(p.systems) for p in pages])  # fmt: skip


def _verovio_pages(
    job: PageJob, cfg: ScorePages, render: RenderSettings, seed: int, result: PageResult
) -> PageResult:
    """`page_systems` for a Verovio job: its pages at cfg.dpi, each system's bars read from
    Verovio's SVG; ties across its line breaks removed and the part engraved again, which must
    break at the same bars."""
    from sonfolio.score.common.musicxml import musicxml_bytes, score_of
    from sonfolio.score.common.verovio import engrave_pages

    font = job.engraver.removeprefix("verovio:")
    width = round(210 / 25.4 * cfg.dpi)  # A4 at the pages' resolution

    def layout(text: str) -> tuple[list, list[int]]:
        xml = musicxml_bytes(score_of([(text, None)])).decode("utf-8")
        pages = engrave_pages(xml, font, width)
        counts = [len(s.measures) for p in pages for s in p.systems]
        if sum(counts) != len(take_apart(text).bars) or min(counts, default=0) < 1:
            raise LayoutUnproven(f"Verovio's systems hold {sum(counts)} measures")
        return pages, counts

    try:
        pages, counts = layout(job.text)
        text, removed = untied(take_apart(job.text), counts)
        if removed:
            pages, again = layout(text)
            if again != counts:
                result.dropped["page_layout_changed"] += 1
                return result
    except (LayoutUnproven, ValueError) as err:
        log.debug("%s: Verovio layout not proven: %s", job.piece, err)
        result.dropped["page_layout_unproven"] += 1
        return result
    grays = [Image.fromarray(p.gray) for p in pages]
    rows = [[(s.top, s.bottom) for s in p.systems] for p in pages]
    return _cut_pages(job, cfg, render, seed, result, lines(text, counts), grays,
                      [len(p.systems) for p in pages], rows)  # fmt: skip


def _cut_pages(
    job: PageJob,
    cfg: ScorePages,
    render: RenderSettings,
    seed: int,
    result: PageResult,
    cut: list[Line],
    grays: list[Image.Image],
    per_page: list[int],
    staff_rows: list[list[tuple[float, float]]] | None = None,
) -> PageResult:
    """Cut each page (its `per_page` lines, in order) and write each line's image with its
    text; a page whose cut does not give one box per line is dropped, counted, and so is one
    where a box does not hold its line's staff (`staff_rows`: per page, each line's top and
    bottom staff line rows, from an engraver that says where it drew them)."""
    for line in cut:
        try:
            validate(line.text, line.time)
        except CanonicalError as err:  # a bug of `lines`: never store a wrong text
            log.error("page line dropped (please report): %s\n%s", err, line.text)
            result.dropped["page_invalid_line"] += 1
            return PageResult(dropped=result.dropped)
    scanned = [False] * len(grays)
    heights = [gray.height for gray in grays]  # staff_rows' scale
    if job.augment:
        grays = _bled(grays, cfg.bleed, render, _seed(seed, f"{job.stem}-bleed"))
        grays, scanned = _scanned(grays, cfg, render, _seed(seed, f"{job.stem}-scan"))
    first = 0
    for k, (gray, n) in enumerate(zip(grays, per_page, strict=True)):
        here = cut[first : first + n]
        first += n
        systems = cut_page(np.asarray(gray), cfg.cut)
        boxes = [box for box, _ in systems]
        rows = None if staff_rows is None else staff_rows[k]
        if rows is not None and scanned[k]:  # the `dpi` kind may have resampled the page
            scale = gray.height / heights[k]
            rows = [(t * scale, u * scale) for t, u in rows]
        if len(boxes) != len(here) or (
            rows is not None
            and not all(b.top <= t and u <= b.bottom for b, (t, u) in zip(boxes, rows, strict=True))
        ):
            result.dropped["page_cut_mismatch"] += len(here)
            continue
        for (_, pixels), line in zip(systems, here, strict=True):
            dest = job.dest / f"{job.stem}-{len(result.lines):03d}.png"
            # a line of a page made scan-like whole is degraded already: only fitted to size
            image_seed = _seed(seed, dest.name) if job.augment and not scanned[k] else None
            crop = Image.fromarray(pixels)
            dest.parent.mkdir(parents=True, exist_ok=True)
            finish(crop, render, image_seed).save(dest, compress_level=1)
            result.images.append(dest)
            result.lines.append(line)
    return result


def _bled(
    grays: list[Image.Image], share: float, render: RenderSettings, seed: int
) -> list[Image.Image]:
    """`grays` (a part's pages, in order), a seeded `share` of them showing the back's print
    through: the part's next page (its previous one for the last, itself for a one-page part),
    mirrored and faint, at score_data.scan.bleed's darkness. A scan of thin paper shows another
    page's staves between and across its own, which the page cutter's crops then hold; a system
    image made scan-like alone shows only its own mirror, its ghost staff lines on its own."""
    from sonfolio.score.common.scan import bleed_through

    if share <= 0 or render.scan is None:
        return grays
    rng = np.random.default_rng(seed)
    out = []
    for k, gray in enumerate(grays):
        if rng.random() >= share:
            out.append(gray)
            continue
        back = grays[k + 1] if k + 1 < len(grays) else grays[max(0, k - 1)]
        page = bleed_through(np.asarray(gray), render.scan.bleed, rng, np.asarray(back))
        out.append(Image.fromarray(page))
    return out


def _scanned(
    grays: list[Image.Image], cfg: ScorePages, render: RenderSettings, seed: int
) -> tuple[list[Image.Image], list[bool]]:
    """`grays` (pages at cfg.dpi), a seeded share of them (cfg.scan) made scan-like whole
    (score_data.scan's settings), and which ones.
    Each such page draws as many of the kinds that keep a page's shape as a scan-like system
    image does (augment.scan_kinds of SYSTEM_SCAN_KINDS): a page's threshold and bleed-through
    then put black ghost ink between and across its staves, as a held-out scan's do, where a
    system image made scan-like alone shows only its own mirror on its own lines."""
    from sonfolio.config.data import SYSTEM_SCAN_KINDS
    from sonfolio.score.common.scan import scan_like

    if cfg.scan <= 0 or render.scan is None:
        return grays, [False] * len(grays)
    rng = np.random.default_rng(seed)
    out, scanned = [], []
    least, most = render.augment.scan_kinds
    for gray in grays:
        if rng.random() >= cfg.scan:
            out.append(gray)
            scanned.append(False)
            continue
        count = int(rng.integers(least, most + 1))
        kinds = tuple(str(k) for k in rng.choice(SYSTEM_SCAN_KINDS, count, False))
        page = scan_like(np.asarray(gray), cfg.dpi, render.scan, int(rng.integers(2**31)), kinds)
        out.append(Image.fromarray(page))
        scanned.append(True)
    return out, scanned


def _seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/page/{name}".encode()).digest()[:4], "big")
