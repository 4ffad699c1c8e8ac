"""Reading whole pages, measured note by note: what `read --page` makes of a page against the
notes on it. Shared by the eval stage (held-out pages, in the report) and benchmarks/pages.py.

Notes: (pitch, duration) pairs in order, music21 pitches (`F#4`) and quarter lengths, a
chord's pitches from low to high, from a canonical text (valid or not: what the grammar's note,
chord and tuplet shapes recover; anything else is ignored). A page's truth is the notes whose
onset lies within its lines (LilyPond's own layout report, sonfolio.score.common.pages); a page's
reading is its predicted systems' notes in page order. note_error_rate: the edit distance
between the sequences / truth length, summed over pages; `_pitch`: pitches only. The baseline
repeats the page's most common note (or pitch) as often as the truth has notes.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from music21 import pitch
from PIL import Image
from rapidfuzz.distance import Levenshtein

from sonfolio.intervals import difference_interval, grouped, rate_interval
from sonfolio.score.common.canonical import CanonicalError, bar_lengths, validate
from sonfolio.score.common.lexicon import (
    ALTER,
    DURATION_RE,
    FRACTION,
    GRACES,
    PITCH_RE,
    REST,
    dur_value,
)
from sonfolio.score.common.pages import Layout, LayoutUnproven, Page, engrave, join_lines

log = logging.getLogger(__name__)

# Lenient note shapes of the canonical grammar (a prediction may break the grammar anywhere),
# from the lexicon's spellings: groups step, alteration, marks (, base, dots).
_NOTE = re.compile(rf"{PITCH_RE}{DURATION_RE}~?")
_CHORD_OPEN = re.compile(rf"<{PITCH_RE}")
_CHORD_MID = re.compile(PITCH_RE)
_CHORD_END = re.compile(rf"{PITCH_RE}>{DURATION_RE}~?")


@dataclass(frozen=True)
class Note:
    pitch: str  # music21 nameWithOctave: "F#4"
    length: Fraction  # quarter notes (a tuplet's members scaled)
    onset: Fraction  # whole notes from the start, as LilyPond's moments


def _m21_pitch(step: str, alter: str | None, marks: str | None) -> str:
    octave = 3 + (marks or "").count("'") - (marks or "").count(",")
    return pitch.Pitch(step.upper(), octave=octave, accidental=ALTER[alter or ""]).nameWithOctave


def notes_of(text: str) -> tuple[list[Note], Fraction]:
    """The notes a text spells, in order, and where its music ends (whole notes); tokens
    that are no note shape are skipped (markings such as `-.`, `\\p`, `(`; `\\bar ":|."`).

    A chord gives each of its pitches (as written, low to high in canonical text); rests move
    time on but give no note; `\\tuplet N/M { ... }` scales its members by M/N. A grace group
    (`\\grace { ... }`, `\\acciaccatura { ... }`) lasts nothing and gives no note, as
    music21's notes leave grace notes out (benchmarks/pages.py): its notes and chords are
    skipped up to its `}` (without braces: the one event after the command), or up to the
    first token that is none of them in a broken group.
    """
    notes: list[Note] = []
    onset, scale = Fraction(0), Fraction(1)
    chord: list[str] | None = None
    # inside a grace group: its events still to skip (-1: up to its `}`); 0: not in one
    grace = 0
    toks = text.split()
    for i, tok in enumerate(toks):
        if grace:
            if tok in ("{", "}"):  # a group opens, or ends
                grace = -1 if tok == "{" and toks[i - 1] in GRACES else 0
                if grace or tok == "}":
                    continue
            elif _NOTE.fullmatch(tok) or _CHORD_END.fullmatch(tok):
                if grace > 0:  # `\\grace c'8` without braces: that one event
                    grace -= 1
                continue
            elif _CHORD_OPEN.fullmatch(tok) or _CHORD_MID.fullmatch(tok):
                continue
            else:
                grace = 0  # a group broken off: read on as usual
        if tok in GRACES:
            grace, chord = 1, None
        elif tok == "\\tuplet" and i + 1 < len(toks) and (m := FRACTION.fullmatch(toks[i + 1])):
            scale = Fraction(int(m[2]), int(m[1]))
        elif tok == "}":
            scale = Fraction(1)
        elif chord is None and (m := _NOTE.fullmatch(tok)):
            length = dur_value(m[4], m[5]) * scale
            notes.append(Note(_m21_pitch(m[1], m[2], m[3]), length * 4, onset))
            onset += length
        elif m := REST.fullmatch(tok):
            onset += dur_value(m[1], m[2]) * scale
        elif m := _CHORD_OPEN.fullmatch(tok):
            chord = [_m21_pitch(m[1], m[2], m[3])]
        elif chord is not None and (m := _CHORD_MID.fullmatch(tok)):
            chord.append(_m21_pitch(m[1], m[2], m[3]))
        elif chord is not None and (m := _CHORD_END.fullmatch(tok)):
            length = dur_value(m[4], m[5]) * scale
            chord.append(_m21_pitch(m[1], m[2], m[3]))
            notes += [Note(p, length * 4, onset) for p in chord]
            onset, chord = onset + length, None
    return notes, onset


def edit_rate(truth: list, hyp: list) -> tuple[int, int]:
    """(edit distance, truth length) of two sequences of hashable items."""
    return Levenshtein.distance(truth, hyp), len(truth)


def baseline_distance(truth: list) -> int:
    """Errors of a guess that repeats the most common item as often as the truth has items."""
    return len(truth) - (Counter(truth).most_common(1)[0][1] if truth else 0)


def page_truth(notes: list[Note], page: Page) -> list[Note]:
    start, end = page.systems[0][0], page.systems[-1][1]
    return [n for n in notes if start <= n.onset < end]


def page_row(
    piece: str,
    collection: str,
    title: str,
    number: int,
    page: Page,
    truth: list[Note],
    reading: Any,
) -> dict:
    """One page's figures: systems true, found and valid, and the note edit distances."""
    hyp = [n for s in reading.systems for n in notes_of(s.text)[0]]
    pairs, pitches = [(n.pitch, n.length) for n in truth], [n.pitch for n in truth]
    dist, _ = edit_rate(pairs, [(n.pitch, n.length) for n in hyp])
    dist_pitch, _ = edit_rate(pitches, [n.pitch for n in hyp])
    return {
        "piece": piece,
        "collection": collection,
        "title": title,
        "page": number,
        "true_systems": len(page.systems),
        "found_systems": len(reading.systems),
        "valid_systems": sum(s.problem is None for s in reading.systems),
        "truth_notes": len(truth),
        "predicted_notes": len(hyp),
        "distance": dist,
        "distance_pitch": dist_pitch,
        "baseline_distance": baseline_distance(pairs),
        "baseline_distance_pitch": baseline_distance(pitches),
    }


def by_piece(rows: list[dict], key: str) -> tuple[list, list]:
    """(`key` summed, truth notes summed) per piece, in first-seen order: the groups the
    intervals resample (a piece's pages share its style and its engraving's scale)."""
    return grouped([r[key] for r in rows], [r["truth_notes"] for r in rows],
                   [r["piece"] for r in rows])  # fmt: skip


def summarize(rows: list[dict]) -> dict[str, Any]:
    """The figures over all pages (note rates summed over pages, not averaged), each note rate
    with its 95 % bootstrap interval over the pieces (`_ci95`: how far it could move on other
    pieces of the same collections; None under 2 pieces)."""
    found = sum(r["found_systems"] for r in rows)
    true = sum(r["true_systems"] for r in rows)
    truth = sum(r["truth_notes"] for r in rows)
    ratios = [r["found_systems"] / r["true_systems"] for r in rows]

    def rate(key: str) -> float | None:
        return round(sum(r[key] for r in rows) / truth, 4) if truth else None

    return {
        "pages": len(rows),
        "true_systems": true,
        "found_systems": found,
        "valid_rate": round(sum(r["valid_systems"] for r in rows) / found, 4) if found else None,
        "systems_found_ratio": {
            "overall": round(found / true, 4) if true else None,
            "pages_within_0.95_1.05": round(sum(0.95 <= x <= 1.05 for x in ratios) / len(rows), 4)
            if rows
            else None,
            "per_page": [round(x, 3) for x in ratios],
        },
        "truth_notes": truth,
        "predicted_notes": sum(r["predicted_notes"] for r in rows),
        "note_error_rate": rate("distance"),
        "note_error_rate_ci95": rate_interval(*by_piece(rows, "distance")),
        "note_error_rate_pitch": rate("distance_pitch"),
        "note_error_rate_pitch_ci95": rate_interval(*by_piece(rows, "distance_pitch")),
        "pieces": len({r["piece"] for r in rows}),
        "baseline_most_common_note": {
            "note_error_rate": rate("baseline_distance"),
            "note_error_rate_pitch": rate("baseline_distance_pitch"),
        },
    }


def compare(rows_a: list[dict], rows_b: list[dict]) -> dict[str, Any]:
    """Model B's pages against model A's, the same pages of the same pieces in one engraving
    (matched by piece and page): B's note rates minus A's, each with its paired 95 % bootstrap
    interval over the pieces (sonfolio.evaluation.difference_interval). Raises ValueError when
    the two did not read the same pages."""

    def key(r: dict) -> tuple[str, int]:
        return r["piece"], r["page"]

    a, b = {key(r): r for r in rows_a}, {key(r): r for r in rows_b}
    if a.keys() != b.keys() or any(a[k]["truth_notes"] != b[k]["truth_notes"] for k in a):
        raise ValueError("the two models did not read the same pages: compare one run's pages")
    out: dict[str, Any] = {"pages": len(a)}
    for name, field in (("note_error_rate", "distance"), ("note_error_rate_pitch",
                                                          "distance_pitch")):  # fmt: skip
        errors_a, totals = by_piece(rows_a, field)
        errors_b, _ = by_piece([b[key(r)] for r in rows_a], field)
        diff = difference_interval(errors_a, errors_b, totals)
        out[f"{name}_difference"] = diff["difference"]
        out[f"{name}_difference_ci95"] = diff["difference_ci95"]
    return out


def system_note_rates(refs: list[str], hyps: list[str]) -> dict[str, Any]:
    """The same note measure over systems read alone (each hypothesis against its reference),
    summed: what a page's figure is compared with."""
    dist = dist_pitch = total = 0
    for ref_text, hyp_text in zip(refs, hyps, strict=True):
        ref, hyp = notes_of(ref_text)[0], notes_of(hyp_text)[0]
        dist += edit_rate([(n.pitch, n.length) for n in ref], [(n.pitch, n.length) for n in hyp])[0]
        dist_pitch += edit_rate([n.pitch for n in ref], [n.pitch for n in hyp])[0]
        total += len(ref)
    return {
        "note_error_rate": round(dist / total, 4) if total else None,
        "note_error_rate_pitch": round(dist_pitch / total, 4) if total else None,
        "truth_notes": total,
    }


def read_page(variant: Any, png: Path, cfg: Any) -> tuple[Any, float]:
    """The page read as `sonfolio read --page` reads it: decoded, grey, cut, decoded by the
    model; and the seconds it took."""
    from sonfolio.score.decode.image_file import to_gray
    from sonfolio.score.decode.read import read_image

    start = time.perf_counter()
    with Image.open(png) as img:
        gray = to_gray(img, png.name)
    reading = read_image(variant, gray, True, cfg)
    return reading, time.perf_counter() - start


def heldout_parts(rows: list[dict], split: str, limit: int, seed: int) -> list[list[dict]]:
    """Up to `limit` parts of `split` cut from pages by the data stage (manifest rows with
    `layout: page`), each as its lines in page order: a seeded draw of whole parts."""
    import random

    parts: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("layout") == "page" and r["split"] == split:
            stem, _, line = Path(r["image"]).stem.rpartition("-")
            parts.setdefault(stem, []).append({**r, "_line": int(line)})
    stems = sorted(parts)
    random.Random(f"{seed}/pages").shuffle(stems)
    return [sorted(parts[s], key=lambda r: r["_line"]) for s in stems[:limit]]


def evaluate_pages(
    variant: Any,
    parts: list[list[dict]],
    read_cfg: Any,
    exe: Path,
    dpi: int,
    work: Path,
    engravings: tuple[str, ...] = ("lilypond",),
    scan: Any = None,
    samples: Path | None = None,
) -> dict[str, Any]:
    """Each part engraved whole as pages by each of `engravings` (sonfolio.score.eval.
    engravings: LilyPond's default layout, A4, 20 pt, a title; Verovio's in a font; `+scan`:
    made scan-like with `scan`, score_data.scan), each page read as `read --page` reads it.
    The figures over all pages (`summarize`) of LilyPond's clean pages at the top, as before,
    with the pages read per second; `by_engraving` has the same per engraving. A part whose
    layout cannot be proven is counted and skipped for that engraving. `samples`: where the
    first page each engraving read is kept, its cut drawn on it, with its reading
    (`keep_sample`), for the report, and every page's figures (`ROWS`, one line a page with
    its engraving: what `compare` pairs another run's pages with)."""
    from sonfolio.score.eval.engravings import (
        ENGRAVING,
        HeldOutPage,
        LayoutUnknown,
        scan_kinds,
        scanned,
    )

    rows: dict[str, list[dict]] = {e: [] for e in engravings}
    read_s, skipped = {e: 0.0 for e in engravings}, {e: Counter() for e in engravings}
    for k, lines in enumerate(parts):
        text = join_lines([(r["text"], r.get("time")) for r in lines])
        piece, collection = lines[0]["piece"], lines[0]["collection"]
        notes, _ = notes_of(text)
        clean: dict[str, list[HeldOutPage]] = {}
        for name in engravings:
            engraver = ENGRAVING.fullmatch(name).group(1)
            try:
                if engraver not in clean:
                    clean[engraver] = _engrave(engraver, text, exe, dpi, work / f"part{k:03d}")
            except (CanonicalError, LayoutUnproven, LayoutUnknown) as err:
                log.warning("%s: not engraved as pages by %s: %s", piece, engraver, err)
                skipped[name]["not_engraved"] += 1
                continue
            pages = clean[engraver]
            if kinds := scan_kinds(name):
                pages = [
                    scanned(p, dpi, scan, f"{name}/{k}/{n}", kinds) for n, p in enumerate(pages)
                ]
            for number, page in enumerate(pages, 1):
                reading, seconds = read_page(variant, page.png, read_cfg)
                read_s[name] += seconds
                truth = [n for n in notes if page.start <= n.onset < page.end]
                lines_on_page = Page(page.png, [(page.start, page.end)])
                row = page_row(piece, collection, "", number, lines_on_page, truth, reading)
                row["true_systems"] = page.systems
                if samples is not None and not rows[name]:
                    keep_sample(samples, name, page.png, reading, row)
                rows[name].append(row)

    def figures(name: str) -> dict[str, Any]:
        if not rows[name]:
            return {"pages": 0, "skipped_parts": dict(skipped[name])}
        result = summarize(rows[name])
        result["pages_per_second"] = round(len(rows[name]) / read_s[name], 3)
        result["parts"] = len(parts) - sum(skipped[name].values())
        result["skipped_parts"] = dict(skipped[name])
        return result

    if samples is not None:
        from sonfolio.io import write_jsonl

        samples.mkdir(parents=True, exist_ok=True)
        write_jsonl(samples / ROWS, [{**r, "engraving": e} for e in rows for r in rows[e]])
    top = figures("lilypond") if "lilypond" in rows else {"pages": 0}
    return {**top, "by_engraving": {name: figures(name) for name in engravings}}


SAMPLE_WIDTH = 900  # px: a kept page, as the report shows it
ROWS = "rows.jsonl"  # beside the kept samples: every page's figures, by engraving


def keep_sample(folder: Path, engraving: str, png: Path, reading: Any, row: dict) -> None:
    """A page as read: its image (SAMPLE_WIDTH px wide) with each system's box drawn and
    numbered, and a JSON of its figures and each system's text (valid or not). A page the
    reader straightened is shown straightened: the boxes lie in that image."""
    from PIL import ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^a-z0-9]+", "_", engraving.lower())
    with Image.open(png) as img:
        page = img.convert("RGB")
    if reading.deskew_deg:  # as sonfolio.score.common.page.deskew turns it
        turned = (255, 255, 255)
        page = page.rotate(
            reading.deskew_deg, Image.Resampling.BICUBIC, expand=True, fillcolor=turned
        )
    scale = SAMPLE_WIDTH / page.width
    page = page.resize((SAMPLE_WIDTH, round(page.height * scale)))
    draw = ImageDraw.Draw(page)
    for s in reading.systems:
        box = [round(v * scale) for v in s.box.as_list()]
        draw.rectangle(box, outline=(200, 30, 30), width=2)
        draw.text((box[0] + 3, box[1] + 2), str(s.index), fill=(200, 30, 30))
    page.save(folder / f"{stem}.png", optimize=True)
    texts = [
        {"system": s.index, "text": s.text, "valid": s.problem is None} for s in reading.systems
    ]
    n = max(row["truth_notes"], 1)
    summary = {
        "engraving": engraving,
        "note_error_rate": round(row["distance"] / n, 4),
        "true_systems": row["true_systems"],
        "found_systems": row["found_systems"],
        "systems": texts,
    }
    (folder / f"{stem}.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")


def _engrave(engraver: str, text: str, exe: Path, dpi: int, work: Path) -> list[Any]:
    """The clean pages of one part by one engraver, each with its span of the piece."""
    from sonfolio.score.eval.engravings import HeldOutPage, verovio_pages

    validate(text)
    if engraver.startswith("verovio:"):
        return verovio_pages(text, engraver.split(":")[1], work, dpi)
    length = sum(bar_lengths(text), Fraction(0))
    layout = Layout("a4", 20.0, title="Held-out piece", composer="Trad.")
    pages = engrave(text, length, layout, work / "lilypond", exe, dpi, 120)
    return [HeldOutPage(p.png, p.systems[0][0], p.systems[-1][1], len(p.systems)) for p in pages]
