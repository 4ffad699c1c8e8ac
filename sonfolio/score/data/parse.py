"""Music files to music21 scores: MusicXML, kern and ABC (a file of many tunes, tune by tune).

ABC decorations music21 does not read are kept through the parse: `H` (a fermata: music21
drops the note it marks) and `T` (a trill: dropped) become Fermata and Trill expressions.

A file (or tune) that yields no music raises SourceError with a short reason. With
score_data.limits given, a file bigger than its format's cap is refused before it is read
("too_large"; `max_file_mb` for MusicXML, `max_kern_mb`, `max_abc_mb`: music21 takes 1-2 KB of
memory per byte of kern and ~2.6 KB per byte of an ABC tune, so those caps are lower), and an
.mxl's zip is checked (members, unpacked size, ratio) before music21 unpacks it (a 300 KB .mxl
once ran for 10 minutes past 8 GB). What one parse may take past the caps is bounded by its
worker (sonfolio.score.data.dataset.parse_units: `parse_timeout_s`, `parse_memory_mb`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from music21 import articulations, converter, expressions, stream

from sonfolio.parallel import near_memory_limit
from sonfolio.score.data.archives import MB, UnsafeArchive, check_mxl, mxl_caps

if TYPE_CHECKING:
    from sonfolio.config.data import ScoreLimits

log = logging.getLogger(__name__)

SUFFIXES = {
    ".xml": "musicxml",
    ".musicxml": "musicxml",
    ".mxl": "musicxml",
    ".krn": "humdrum",
    ".abc": "abc",
}
_ABC_TUNE_START = re.compile(r"^X:\s*(\S*)", re.MULTILINE)
# ABC decorations right before a note or rest (after its accidentals), outside quoted text,
# `!...!` decorations, inline fields `[K:...]` and comments. music21 reads `M` and `K` (not
# ABC 2.1's meanings) as tenuto and accent; `H` and `T` are carried through them.
_ABC_SKIP = r'"[^"\n]*"|![^!\n]*!|\[[A-Za-z]:[^\]\n]*\]|%.*'
_ABC_DECORATION = re.compile(rf"({_ABC_SKIP})|([HTMK])(?=[=^_]*[A-Ga-gz])")
_ABC_FIELD_LINE = re.compile(r"^(?:[A-Za-z+]:|%)")
_ABC_CARRIERS = {"H": "M", "T": "K"}


class SourceError(ValueError):
    """A source file (or tune) that yields no music; `reason` is a short snake_case tag."""

    def __init__(self, path: Path | str, reason: str, detail: str) -> None:
        super().__init__(f"{path}: {reason}: {detail}")
        self.path = str(path)
        self.reason = reason


def abc_tunes(text: str) -> list[tuple[str, str]]:
    """Split an ABC file into (reference number, tune text); numbers made unique by a suffix.

    A repeated `X:` number gets `-2`, `-3`...; a missing one is replaced by the ordinal `n<k>`.
    """
    starts = [(m.start(), m.group(1)) for m in _ABC_TUNE_START.finditer(text)]
    tunes: list[tuple[str, str]] = []
    seen: Counter[str] = Counter()
    for k, (start, number) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
        number = number or f"n{k + 1}"
        seen[number] += 1
        name = number if seen[number] == 1 else f"{number}-{seen[number]}"
        tunes.append((name, text[start:end]))
    return tunes


# The size cap of each format (a ScoreLimits field): kern and ABC cost far more per byte.
SIZE_CAPS = {"musicxml": "max_file_mb", "humdrum": "max_kern_mb", "abc": "max_abc_mb"}


def too_large(path: Path, limits: ScoreLimits) -> str | None:
    """Why `path` is too big to parse (naming its format's cap to raise), or None."""
    key = SIZE_CAPS[SUFFIXES.get(path.suffix.lower(), "musicxml")]
    cap = getattr(limits, key)
    size = path.stat().st_size
    if size <= cap * MB:
        return None
    return f"{size / MB:,.1f} MB; score_data.limits.{key} is {cap:g}: raise it in params.yaml"


def pieces_from_file(
    path: Path, *, skipped: Counter[str] | None = None, limits: ScoreLimits | None = None
) -> list[tuple[str, stream.Score]]:
    """Parse a MusicXML, kern or ABC file into (suffix, score) pairs, one per piece.

    The suffix is "" for a file holding one piece; for a file holding several (an ABC file of
    many tunes, an opus) it is the tune's `X:` reference number (made unique: `12`, `12-2`)
    or, for other formats, the 1-based position. Piece id: `f"{file_id}#{suffix}"`.

    Args:
        path: the file; its suffix picks the format (.xml .musicxml .mxl .krn .abc).
        skipped: where a multi-tune file keeps its good tunes and skips bad ones, the skipped
            tunes are counted here by reason (and logged).
        limits: score_data.limits: the file's size, and an .mxl's zip, checked first.

    Raises:
        SourceError: reason "missing", "unsupported_format", "unparsable" or "empty" when the
            file yields no piece with notes; "too_large" or "unsafe_member" past `limits`.
    """
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise SourceError(
            path, "unsupported_format", f"suffix {path.suffix!r} not in {sorted(SUFFIXES)}"
        )
    if not path.is_file():
        raise SourceError(path, "missing", "no such file")
    if limits is not None:
        _check_limits(path, limits)
    if fmt == "abc":
        text = path.read_text(encoding="utf-8", errors="replace")
        blocks = abc_tunes(text)
        if not blocks:
            raise SourceError(path, "empty", "no tune (no X: line)")
        if len(blocks) > 1:
            return _abc_opus(path, blocks, skipped)
        return [("", abc_tune_score(path, text))]  # with the file's header, if any
    parsed = _parse(path, lambda: converter.parse(path, format=fmt, forceSource=True))
    if isinstance(parsed, stream.Opus):
        return [(str(k + 1), _require_notes(path, s)) for k, s in enumerate(parsed.scores)]
    return [("", _require_notes(path, _as_score(parsed)))]


def _check_limits(path: Path, limits: ScoreLimits) -> None:
    if why := too_large(path, limits):
        raise SourceError(path, "too_large", why)
    if path.suffix.lower() == ".mxl":
        try:
            check_mxl(path, mxl_caps(limits))
        except UnsafeArchive as err:
            raise SourceError(path, err.reason, str(err)) from err
        except (zipfile.BadZipFile, OSError) as err:
            raise SourceError(path, "unparsable", f"not a readable .mxl (zip): {err}") from err


def _abc_opus(
    path: Path, blocks: list[tuple[str, str]], skipped: Counter[str] | None
) -> list[tuple[str, stream.Score]]:
    # One tune at a time: it costs what parsing the whole opus costs (~20-50 ms a tune), and a
    # bad tune then costs only itself instead of the hundreds of tunes beside it.
    pieces: list[tuple[str, stream.Score]] = []
    for name, block in blocks:
        try:
            pieces.append((name, abc_tune_score(f"{path}#{name}", block)))
        except SourceError as err:
            log.warning("skipping tune %s", err)
            if skipped is not None:
                skipped[err.reason] += 1
    if not pieces:
        raise SourceError(path, "empty", "no tune with notes could be parsed")
    return pieces


def abc_tune_score(where: Path | str, block: str) -> stream.Score:
    """Parse one ABC tune (its text from `X:` on); `where` names it in errors.

    Raises:
        SourceError: reason "unparsable" or "empty".
    """
    block, carried = _carry_decorations(block)
    with _without_beaming():
        parsed = _parse(where, lambda: converter.parse(block, format="abc", forceSource=True))
    score = _require_notes(where, _as_score(parsed))
    if carried:
        _restore_decorations(score)
    return score


def _carry_decorations(block: str) -> tuple[str, bool]:
    """The tune with its `H` and `T` decorations written as music21's `M` and `K`, and whether
    any was; unchanged when the tune uses `M` or `K` itself (they could not be told apart)."""
    lines = block.split("\n")
    found: set[str] = set()
    for line in lines:
        if not _ABC_FIELD_LINE.match(line):
            found.update(m.group(2) for m in _ABC_DECORATION.finditer(line) if m.group(2))
    if not found & {"H", "T"} or found & {"M", "K"}:
        return block, False

    def carry(m: re.Match[str]) -> str:
        return m.group(1) or _ABC_CARRIERS[m.group(2)]

    out = [
        line if _ABC_FIELD_LINE.match(line) else _ABC_DECORATION.sub(carry, line) for line in lines
    ]
    return "\n".join(out), True


def _restore_decorations(score: stream.Score) -> None:
    """Turn the carried decorations back: tenuto into a fermata, accent into a trill."""
    for el in score.recurse().notesAndRests:
        if not el.articulations:
            continue
        kept = []
        for a in el.articulations:
            if type(a) is articulations.Tenuto:
                el.expressions.append(expressions.Fermata())
            elif type(a) is articulations.Accent:
                el.expressions.append(expressions.Trill())
            else:
                kept.append(a)
        el.articulations = kept


@contextlib.contextmanager
def _without_beaming() -> Iterator[None]:
    """music21's ABC import ends by computing beams (`makeBeams`), ~60% of its time, and has
    no option to skip it. Beams are engraving hints the canonical text never carries
    (LilyPond beams by itself), so they are skipped while a tune is parsed: the systems come
    out the same (tests/score/test_convert.py checks it)."""
    original = stream.Stream.makeBeams
    stream.Stream.makeBeams = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        stream.Stream.makeBeams = original  # type: ignore[method-assign]


def _parse(where: Path | str, parse: Callable[[], stream.Stream]) -> stream.Stream:
    try:
        return parse()
    except MemoryError:  # past parse_memory_mb: its worker reports it (too_large), not here
        raise
    except Exception as exc:  # music21 raises many unrelated types on bad input
        # the limit refused an allocation under another name; a quarter of the allowance,
        # as one refused block (a list or array music21 grows) may be tens of MB
        if near_memory_limit(margin=0.25):
            raise MemoryError(f"{where}: {type(exc).__name__} at the memory limit") from exc
        raise SourceError(where, "unparsable", f"{type(exc).__name__}: {exc}") from exc


def _as_score(parsed: stream.Stream) -> stream.Score:
    if isinstance(parsed, stream.Score):
        return parsed
    score = stream.Score()
    score.insert(0, parsed)
    return score


def _require_notes(where: Path | str, score: stream.Score) -> stream.Score:
    if not score.parts or not any(p.recurse().notes for p in score.parts):
        raise SourceError(where, "empty", "no notes")
    return score
