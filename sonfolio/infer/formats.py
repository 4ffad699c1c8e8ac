"""What `read` and `transcribe` print: text, LilyPond or JSON (docs/inference.md)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence

from sonfolio.infer.run import ChunkText, Reading
from sonfolio.score.lilypond import document

READ_FORMATS = ("text", "ly", "json")
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


def read_lilypond(results: Sequence[tuple[str, Reading]]) -> str:
    """A LilyPond file with the project's preamble and one \\score per system, in order.

    A text outside the canonical grammar is left out (listed in a comment with the reason, its
    text only in `--format json`): it may not compile, and LilyPond input can run Scheme, so
    only canonical text goes in. Every other byte is the preamble or a comment of flat_text:
    an image's name is the user's (or an uploader's) and must not become LilyPond input.
    """
    header = ["% Read by `sonfolio read`: one \\score per staff system, in this order"]
    kept: list[str] = []
    for name, reading in results:
        for s in reading.systems:
            where = f"{flat_text(name)} system {s.index} (box {s.box.as_list()})"
            if s.problem is None:
                kept.append(s.text)
                header.append(f"% \\score {len(kept)}: {where}")
            else:
                why = flat_text(s.problem)
                header.append(f"% left out, not canonical LilyPond ({why}): {where}")
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
        # No speech heard in any chunk (infer.no_speech): the empty text is not a model's miss.
        "no_speech": bool(chunks) and all(c.no_speech for c in chunks),
        "chunks": [c.as_dict() for c in chunks],
    }


def transcripts_text(results: Sequence[dict]) -> str:
    if len(results) == 1:
        return results[0]["text"] + "\n"
    return "".join(f"==> {r['audio']} <==\n{r['text']}\n" for r in results)


def transcripts_json(model: str, results: Sequence[dict]) -> str:
    return json.dumps({"model": model, "files": list(results)}, ensure_ascii=False, indent=2) + "\n"
