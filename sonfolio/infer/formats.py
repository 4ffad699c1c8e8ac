"""What `read` and `transcribe` print: text, LilyPond, MusicXML or JSON (docs/inference.md)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `transcribe` loads nothing of the score track
    from sonfolio.infer.run import ChunkText, Reading

READ_FORMATS = ("text", "ly", "json", "musicxml")
TRANSCRIBE_FORMATS = ("text", "json")


def read_result(name: str, reading: Reading) -> dict:
    """One image's systems as the JSON of `read --format json` and of POST /read."""
    return {
        "image": name,
        "deskew_deg": reading.deskew_deg,
        "systems": [s.as_dict() for s in reading.systems],
    }


def read_text(results: Sequence[tuple[str, Reading]]) -> str:
    """One line per system; a `==> image <==` line before each image's when there are several."""
    lines: list[str] = []
    for name, reading in results:
        if len(results) > 1:
            lines.append(f"==> {name} <==")
        lines += [s.text for s in reading.systems]
    return "\n".join(lines) + "\n"


# What a comment in a .ly file may hold: letters and digits of any script, spaces and this
# punctuation. Everything else becomes "?": a line end would end the comment (and what follows
# is LilyPond input, where `#` and `$` run Scheme), and `\\`, braces, quotes, `%{` are what
# LilyPond and Scheme interpret. An allow-list, not a deny-list: nothing unforeseen gets in.
_SAFE_PUNCTUATION = frozenset(" .,:;_-+=/()[]<>@!?*^~|&'")
COMMENT_MAX_CHARS = 200  # a name longer than this is cut (the full name is in --format json)


def flat_text(text: str, limit: int = COMMENT_MAX_CHARS) -> str:
    """`text` as safe text for a LilyPond `%` comment: one line, nothing LilyPond interprets.

    Non-UTF-8 bytes of a file name (Python holds them as lone surrogates) become "?" too, so
    the file can be written as UTF-8.
    """
    out = []
    for ch in text:
        if ch in _SAFE_PUNCTUATION or unicodedata.category(ch)[0] in "LN":
            out.append(ch)
        elif ch.isspace():
            out.append(" ")
        else:
            out.append("?")
    flat = " ".join("".join(out).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def comment_text(text: str) -> str:
    """`text` as the rest of a `%` line comment, kept as it was but on one line.

    LilyPond's lexer ends a line comment at a line feed or carriage return only, and reads
    nothing inside it, so any other character is inert there; every control character and
    Unicode line or paragraph separator becomes a space all the same (an editor may break the
    line there). The caller writes "% " before it, so it cannot open a `%{` block comment.
    """
    out = "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in text)
    return out.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"


def valid_systems(results: Sequence[tuple[str, Reading]]) -> int:
    """How many systems read are valid canonical LilyPond (what a .ly can engrave)."""
    return sum(s.problem is None for _, reading in results for s in reading.systems)


def read_lilypond(results: Sequence[tuple[str, Reading]]) -> str:
    from sonfolio.score.common.lilypond import document
    from sonfolio.score.eval.compile_check import lilypond_text

    """A LilyPond file with the project's preamble and one \\score per system, in order.

    A text outside the canonical grammar is not engraved: it may not compile, and LilyPond
    input can run Scheme, so only canonical text goes in. It is kept, marked, as a `%` comment
    line (comment_text) under the reason, so the reading is not lost. Names are comments of
    flat_text: an image's name is the user's (or an uploader's) and must not become input.
    When no system is valid, the first lines say that nothing is engraved.
    """
    header = ["% Read by `sonfolio read`: one \\score per staff system, in this order"]
    if not valid_systems(results):
        header.append(
            "% NOTHING ENGRAVED: none of the texts read is valid canonical LilyPond "
            "(they are kept below, as comments)"
        )
    kept: list[str] = []
    for name, reading in results:
        for s in reading.systems:
            where = f"{flat_text(name)} system {s.index} (box {s.box.as_list()})"
            if s.problem is None:
                # a system that prints no time signature is read in the one above's
                kept.append(lilypond_text(s.text, s.time))
                header.append(f"% \\score {len(kept)}: {where}")
            else:
                why = flat_text(s.problem)
                header.append(f"% left out, not canonical LilyPond ({why}): {where}")
                header.append(f"%   its text: {comment_text(s.text)}")
    return "\n".join(header) + "\n" + document(kept)


def read_json(model: str, results: Sequence[tuple[str, Reading]]) -> str:
    images = [read_result(name, reading) for name, reading in results]
    return json.dumps({"model": model, "images": images}, ensure_ascii=False, indent=2) + "\n"


def transcript_result(name: str, duration_s: float, chunks: Sequence[ChunkText], text: str) -> dict:
    """One audio file as the JSON of `transcribe --format json` and of POST /transcribe."""
    return {
        "audio": name,
        "duration": round(duration_s, 3),
        "text": text,
        # No speech heard in any chunk (infer.speech.no_speech): the empty text is not a model's
        # miss.
        "no_speech": bool(chunks) and all(c.no_speech for c in chunks),
        "chunks": [c.as_dict() for c in chunks],
    }


def transcripts_text(results: Sequence[dict]) -> str:
    if len(results) == 1:
        return results[0]["text"] + "\n"
    return "".join(f"==> {r['audio']} <==\n{r['text']}\n" for r in results)


def transcripts_json(model: str, results: Sequence[dict]) -> str:
    return json.dumps({"model": model, "files": list(results)}, ensure_ascii=False, indent=2) + "\n"
