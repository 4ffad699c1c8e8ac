"""What `read` and `transcribe` print: text, LilyPond or JSON (docs/inference.md)."""

from __future__ import annotations

import json
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


def read_lilypond(results: Sequence[tuple[str, Reading]]) -> str:
    """A LilyPond file with the project's preamble and one \\score per system, in order.

    A text outside the canonical grammar is left out (listed in a comment with the reason): it
    may not compile, and LilyPond input can run Scheme, so only canonical text goes in.
    """
    header = ["% Read by `sonfolio read`: one \\score per staff system, in this order"]
    kept: list[str] = []
    for name, reading in results:
        for s in reading.systems:
            where = f"{name} system {s.index} (box {s.box.as_list()})"
            if s.problem is None:
                kept.append(s.text)
                header.append(f"% \\score {len(kept)}: {where}")
            else:
                flat = " ".join(s.text.split())  # a comment must stay on one line
                why = " ".join(s.problem.split())
                header.append(f"% left out, not canonical LilyPond ({why}): {where}: {flat}")
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
        "chunks": [c.as_dict() for c in chunks],
    }


def transcripts_text(results: Sequence[dict]) -> str:
    if len(results) == 1:
        return results[0]["text"] + "\n"
    return "".join(f"==> {r['audio']} <==\n{r['text']}\n" for r in results)


def transcripts_json(model: str, results: Sequence[dict]) -> str:
    return json.dumps({"model": model, "files": list(results)}, ensure_ascii=False, indent=2) + "\n"
