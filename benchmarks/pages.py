"""Whole pages of held-out music, engraved by LilyPond and by Verovio, clean and made to look
scanned or photographed, read end to end as `sonfolio read --page` reads them, and compared
with the truth note by note.

    python -m benchmarks.pages [--pieces 24] [--model DIR] [--dpi 200] [--paper a4]
        [--engravings lilypond lilypond+scan verovio:Leland verovio:Leland+scan]

Engravings (sonfolio/score/eval/engravings.py): `lilypond`, LilyPond's default layout as below
(the training engraver; its figures are the top-level ones, as before engravings were added);
`verovio:<font>`, Verovio's own layout in one of its SMuFL fonts (Leland: the font the data
stage keeps out of training); `+scan`, each page made scan-like (score_data.scan: resolution,
JPEG, threshold, skew, perspective, curl, light, bleed-through, broken lines; seeded per
page); `+scan:<kind>[,<kind>...]`, those kinds only (a held-out measure per kind). `by_engraving`
in the JSON has each one's figures on the same pieces.

Pieces: whole pieces of the collections params.yaml holds out of training
(score_data.split.heldout_collections) and of music21 collections no score_data source uses
(--extra, default airdsAirs), seeded (--seed), taken in turn from each collection. A piece
must convert to one staff of canonical LilyPond as a whole (sonfolio.score.data.convert with one
system for the whole part); one that does not is skipped and counted by reason.

Engraving: the piece's canonical text in a plain `\\score` with a `\\header` title, LilyPond's
default layout otherwise (its own line and page breaking, bar numbers, no time signature on
continuation systems, the tagline), PNG pages at --dpi.

Truth, per page and proven: sonfolio.score.common.pages engraves with a `page-post-process` hook
that prints, for each page, each system's first and last moment (its left and right paper
columns' `when`, in whole notes from the start). The systems must tile the piece exactly
(first at 0, each starting where the previous ends, the last ending at the text's length) and
the pages must match the PNGs written, or the piece is skipped (`layout_unproven`). A page's
true notes are the notes whose onset lies within its systems.

Notes: (pitch, duration) pairs in order, music21 pitches (`F#4`) and quarter lengths, a
chord's pitches from low to high. The truth's come from the engraved canonical text (and are
checked against music21's own reading of the piece, `truth_matches_music21`); a prediction's
from each predicted system's text, valid or not (what the grammar's note, chord and tuplet
shapes recover; anything else is ignored), concatenated in page order. note_error_rate: the
edit distance between the sequences / truth length, summed over pages; `_pitch`: pitches only.
The baseline repeats the page's most common note (or pitch) as often as the truth has notes.
For context, from the --root run's eval@score of the same variant: system_ter_test (the test
split's symbol, i.e. token, error rate: `ser` in metrics/score_eval.json) and
note_error_rate_test_systems (this note measure on its test predictions.jsonl).

Each note rate comes with its 95 % bootstrap interval over the pieces (`_ci95`: how far it
could move on other pieces of the same collections). `--against DIR` reads the same pages with
a second model and writes, per engraving, its rates minus the first model's with the paired
interval (`against.by_engraving`): an interval that holds 0 cannot tell the two models apart on
these pieces.

Writes benchmarks/results/pages.json (figures, per-page rows, conditions) and prints a table.
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from music21 import stream
from rich.table import Table

from benchmarks import console
from sonfolio import cpu
from sonfolio.config.data import ScoreSource
from sonfolio.config.params import Params, load_params
from sonfolio.io import read_jsonl, write_json
from sonfolio.score.common import pages
from sonfolio.score.common.lilypond import find_lilypond
from sonfolio.score.common.pages import Layout, LayoutUnproven, Page
from sonfolio.score.data.convert import systems_from_score
from sonfolio.score.data.parse import SourceError, abc_tune_score, abc_tunes, pieces_from_file
from sonfolio.score.data.sources import Unit, list_units
from sonfolio.score.eval import page_eval
from sonfolio.score.eval.engravings import (
    ENGRAVING,
    HeldOutPage,
    LayoutUnknown,
    scan_kinds,
    scanned,
    verovio_pages,
)
from sonfolio.score.eval.page_eval import (
    Note,
    compare,
    notes_of,
    read_page,
    summarize,
    system_note_rates,
)

RESULTS = Path("benchmarks/results/pages.json")
# LilyPond (the training engraver) first: its figures are the top-level ones; Leland is the
# Verovio font the data stage never draws (score_data.engravers.heldout_font)
ENGRAVINGS = ("lilypond", "lilypond+scan", "verovio:Leland", "verovio:Leland+scan")
WHOLE_PIECE = 100_000  # bars per system: the converter gives the whole part as one text


def music21_notes(part: stream.Part) -> list[tuple[str, Fraction]]:
    """music21's own (pitch, quarter length) sequence of a part, grace notes left out."""
    out: list[tuple[str, Fraction]] = []
    for n in part.flatten().notes:
        if n.duration.isGrace:
            continue
        ql = Fraction(n.quarterLength).limit_denominator(1000)
        out += [(p.nameWithOctave, ql) for p in sorted(n.pitches, key=lambda p: p.ps)]
    return out


@dataclass(frozen=True)
class Piece:
    unit: Unit
    title: str
    text: str  # the whole part as one canonical text
    music21: list[tuple[str, Fraction]]  # music21's own notes of the part


def candidate_units(params: Params, extra: list[str], seed: int) -> list[Unit]:
    """Held-out and unused collections' pieces, each collection shuffled with `seed`, then
    taken in turn (first of each, second of each...), so any prefix mixes them."""
    cfg = params.score_data
    used = {s.music21 for s in cfg.sources if s.music21}
    held = [s for s in cfg.sources if s.name in cfg.split.heldout_collections]
    unused = [name for name in extra if name not in used]
    sources = [s.model_copy(update={"max_pieces": None}) for s in held]
    sources += [ScoreSource(name=n, music21=n) for n in unused]
    pools = []
    for source in sources:
        units = list_units(source, params.paths.download_cache, seed, cfg.limits)
        random.Random(f"{seed}/pages/{source.name}").shuffle(units)
        pools.append(units)
    return [u for row in zip(*pools, strict=False) for u in row]


def load_piece(unit: Unit, counts: Counter[str]) -> Piece | None:
    """The piece as one canonical text, or None (counted by reason) when it has several
    staves or a measure the converter cannot write."""
    try:
        if unit.tune is None:
            score = pieces_from_file(unit.path)[0][1]
        else:
            block = abc_tunes(unit.path.read_text(encoding="utf-8", errors="replace"))[unit.tune]
            score = abc_tune_score(unit.piece, block[1])
    except SourceError as err:
        counts[f"source_{err.reason}"] += 1
        return None
    if len(score.parts) != 1:
        counts["not_one_staff"] += 1
        return None
    systems, _ = systems_from_score(score, unit.piece, WHOLE_PIECE)
    if len(systems) != 1:  # a measure the converter drops drops the whole piece
        counts["not_convertible"] += 1
        return None
    title = (score.metadata.title if score.metadata else None) or unit.piece.rsplit("/", 1)[-1]
    return Piece(unit, title, systems[0].text, music21_notes(score.parts[0]))


def engrave(text: str, title: str, workdir: Path, exe: Path, dpi: int, paper: str) -> list[Page]:
    """PNG pages of the piece in LilyPond's default layout, each with its systems' moments
    (sonfolio.score.common.pages.engrave; raises its LayoutUnproven)."""
    _, length = notes_of(text)
    return pages.engrave(text, length, Layout(paper, title=title), workdir, exe, dpi, 300)


def page_row(piece: Piece, number: int, page: Page, truth: list[Note], reading: Any) -> dict:
    """One page's figures (sonfolio.score.eval.page_eval.page_row) for a benchmark piece."""
    unit = piece.unit
    return page_eval.page_row(
        unit.piece, unit.collection, piece.title, number, page, truth, reading
    )


def test_split_figures(metrics: Path, predictions: Path, variant: str) -> dict[str, Any]:
    """The test split's symbol (token) error rate from eval@score, and the same note error
    measure on its predictions, for the model's own renders; None where absent."""
    import json

    ter = None
    if metrics.is_file():
        splits = json.loads(metrics.read_text())["variants"].get(variant, {}).get("splits", {})
        ter = splits.get("test", {}).get("ser")
    out: dict[str, Any] = {"system_ter_test": ter, "note_error_rate_test_systems": None}
    if predictions.is_file():
        rows = read_jsonl(predictions)
        rates = system_note_rates([r["ref"] for r in rows], [r["hyp"] for r in rows])
        out["note_error_rate_test_systems"] = {**rates, "predictions": str(predictions)}
    return out


def clean_pages(engraver: str, piece: Piece, work: Path, exe: Path, args: Any) -> list[Any]:
    """A piece's clean pages by one engraver, each with the span of the piece it holds."""
    if engraver.startswith("verovio:"):
        return verovio_pages(piece.text, engraver.split(":")[1], work / engraver, args.dpi)
    pages = engrave(piece.text, piece.title, work / "lilypond", exe, args.dpi, args.paper)
    return [HeldOutPage(p.png, p.systems[0][0], p.systems[-1][1], len(p.systems)) for p in pages]


def run(args: argparse.Namespace, params: Params, variant: Any, work: Path) -> dict[str, Any]:
    """Each piece engraved by every engraving of --engravings, its pages read; the figures of
    LilyPond's clean pages at the top (as before engravings were added), each engraving's
    under `by_engraving`. A piece one engraver cannot lay out provably is skipped for all."""
    exe = find_lilypond(params.score_data.lilypond)
    counts: Counter[str] = Counter()
    rows: dict[str, list[dict]] = {e: [] for e in args.engravings}
    pieces, read_s = [], dict.fromkeys(args.engravings, 0.0)
    for unit in candidate_units(params, args.extra, args.seed):
        if len(pieces) == args.pieces:
            break
        piece = load_piece(unit, counts)
        if piece is None:
            continue
        here = work / f"{len(pieces):03d}"
        engravers = dict.fromkeys(ENGRAVING.fullmatch(e).group(1) for e in args.engravings)
        try:
            clean = {e: clean_pages(e, piece, here, exe, args) for e in engravers}
        except (LayoutUnproven, LayoutUnknown) as err:
            logging.warning("%s: %s", unit.piece, err)
            counts["layout_unproven"] += 1
            continue
        notes, _ = notes_of(piece.text)
        for name in args.engravings:
            pages = clean[ENGRAVING.fullmatch(name).group(1)]
            if kinds := scan_kinds(name):
                key = f"{name}/{unit.piece}"
                pages = [scanned(p, args.dpi, params.score_data.scan, f"{key}/{k}", kinds)
                         for k, p in enumerate(pages)]  # fmt: skip
            for number, page in enumerate(pages, 1):
                reading, seconds = read_page(variant, page.png, params.infer)
                read_s[name] += seconds
                truth = [n for n in notes if page.start <= n.onset < page.end]
                span = Page(page.png, [(page.start, page.end)])
                row = page_row(piece, number, span, truth, reading)
                rows[name].append({**row, "engraving": name, "true_systems": page.systems,
                                   "read_s": round(seconds, 3)})  # fmt: skip
        pieces.append(
            {
                "piece": unit.piece,
                "title": piece.title,
                "pages": {e: len(p) for e, p in clean.items()},
                "truth_notes": len(notes),
                "truth_matches_music21": [(n.pitch, n.length) for n in notes] == piece.music21,
            }
        )

    def figures(name: str) -> dict[str, Any]:
        out = summarize(rows[name])
        out["pages_per_second"] = round(len(rows[name]) / read_s[name], 3) if read_s[name] else None
        return out

    head = args.engravings[0]
    result = figures(head)
    result["headline_engraving"] = head
    result["by_engraving"] = {name: figures(name) for name in args.engravings}
    result["pieces"] = pieces
    result["skipped_pieces"] = dict(counts)
    result["rows"] = [r for name in args.engravings for r in rows[name]]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pieces", type=int, default=24, help="whole pieces engraved and read")
    parser.add_argument("--seed", type=int, default=0, help="which pieces")
    parser.add_argument(
        "--extra", nargs="*", default=["airdsAirs"],
        help="music21 corpus folders no score_data source uses, besides the held-out ones",
    )  # fmt: skip
    parser.add_argument(
        "--root", type=Path, default=Path("."),
        help="the pipeline run whose params.yaml paths hold the models, metrics and eval",
    )  # fmt: skip
    parser.add_argument("--model", type=Path, help="default: as `sonfolio read` picks it")
    parser.add_argument(
        "--against", type=Path,
        help="a second model folder: it reads the same pages, and its note rates minus "
        "--model's are given per engraving with their paired 95 %% interval",
    )  # fmt: skip
    parser.add_argument("--dpi", type=int, default=200, help="page render resolution")
    parser.add_argument("--paper", default="a4", help="LilyPond paper size (a4, letter...)")
    parser.add_argument(
        "--engravings", nargs="+", default=list(ENGRAVINGS),
        help="lilypond, verovio:<font>, either with +scan (every kind) or +scan:<kind>[,...]; "
        "the first gives the top-level figures",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2, help="the model's CPU threads")
    parser.add_argument("--keep", type=Path, help="keep the engraved pages in this folder")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    for name in args.engravings:
        try:
            scan_kinds(name)  # its message names what to write
        except ValueError as err:
            parser.error(f"--engravings: {err}")
    logging.basicConfig(level=logging.WARNING)
    from sonfolio.infer.run import load_model

    params = load_params(args.root / "params.yaml")
    paths = params.paths
    model = args.model
    if model is None:  # as `sonfolio read` picks it, in the --root run
        exported = args.root / paths.track("score").export / params.infer.variant
        model = exported if exported.is_dir() else args.root / paths.track("score").model
    if args.against is not None and not args.against.is_dir():
        parser.error(f"--against {args.against}: no such model folder")
    variant = load_model(model, "score", args.threads, "cpu")
    load_before = cpu.load_average()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        result = run(args, params, variant, work)
        if args.against is not None:  # the same pieces and pages: the draw is seeded
            other = run(args, params, load_model(args.against, "score", args.threads, "cpu"),
                        work / "against")  # fmt: skip
            result["against"] = against(args.against, result, other)
    result.update(
        test_split_figures(
            args.root / paths.metrics / "score_eval.json",
            args.root / paths.track("score").eval / "samples" / model.name / "test"
            / "predictions.jsonl",
            model.name,
        )
    )  # fmt: skip
    result["conditions"] = {
        "model": str(model),
        "truth": "per page: its engraver's own layout (LilyPond: a page-post-process hook gives "
        "each system's first and last moment, checked to tile each piece exactly; Verovio: its "
        "SVG names each system's measures, checked to hold every measure once, in order)",
        "engravings": args.engravings,
        "dpi": args.dpi,
        "paper": args.paper,
        "seed": args.seed,
        "collections": sorted({p["piece"].split("/")[0] for p in result["pieces"]}),
        "threads": args.threads,
        **cpu.run_conditions(load_before),
    }
    write_json(args.out, result)
    print_table(result)
    print(f"wrote {args.out}")


def against(model: Path, first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The second model's figures per engraving and its note rates minus the first's on the
    same pages (sonfolio.score.eval.page_eval.compare)."""
    out: dict[str, Any] = {"model": str(model), "by_engraving": {}}
    for name, figures in second["by_engraving"].items():
        mine = [r for r in first["rows"] if r["engraving"] == name]
        theirs = [r for r in second["rows"] if r["engraving"] == name]
        out["by_engraving"][name] = {
            "note_error_rate": figures["note_error_rate"],
            "note_error_rate_ci95": figures["note_error_rate_ci95"],
            "note_error_rate_pitch": figures["note_error_rate_pitch"],
            **compare(mine, theirs),
        }
    return out


def interval(figures: dict[str, Any], key: str) -> str:
    ci = figures.get(f"{key}_ci95")
    return f"{figures.get(key)} ({ci[0]} to {ci[1]})" if ci else str(figures.get(key))


def print_table(result: dict[str, Any]) -> None:
    table = Table(title=f"pages read end to end ({result['conditions']['model']})")
    cols = ("engraving", "piece", "page", "systems true/found/valid", "notes true/pred", "NER",
            "NER pitch")  # fmt: skip
    for col in cols:
        table.add_column(col, overflow="fold")
    for r in result["rows"]:
        n = max(r["truth_notes"], 1)
        table.add_row(
            r["engraving"], r["piece"], str(r["page"]),
            f"{r['true_systems']}/{r['found_systems']}/{r['valid_systems']}",
            f"{r['truth_notes']}/{r['predicted_notes']}",
            f"{r['distance'] / n:.3f}", f"{r['distance_pitch'] / n:.3f}",
        )  # fmt: skip
    console().print(table)
    each = Table(title="per engraving (the same pieces)")
    for col in ("engraving", "pages", "systems found/true", "valid", "NER", "NER pitch",
                "most common note"):  # fmt: skip
        each.add_column(col)
    for name, f in result["by_engraving"].items():
        each.add_row(
            name, str(f["pages"]), f"{f['found_systems']}/{f['true_systems']}",
            str(f["valid_rate"]), interval(f, "note_error_rate"),
            interval(f, "note_error_rate_pitch"),
            str(f["baseline_most_common_note"]["note_error_rate"]),
        )  # fmt: skip
    console().print(each)
    if "against" in result:
        other = Table(title=f"against {result['against']['model']}: its rates minus the above's")
        for col in ("engraving", "NER", "NER difference (95 % interval)",
                    "NER pitch difference (95 % interval)"):  # fmt: skip
            other.add_column(col)
        for name, f in result["against"]["by_engraving"].items():
            other.add_row(
                name, interval(f, "note_error_rate"),
                interval(f, "note_error_rate_difference"),
                interval(f, "note_error_rate_pitch_difference"),
            )  # fmt: skip
        console().print(other)
    base = result["baseline_most_common_note"]
    test = result.get("note_error_rate_test_systems") or {}
    ratio = result["systems_found_ratio"]
    for name, value in (
        ("note error rate (pitch+duration / pitch)",
         f"{interval(result, 'note_error_rate')} / {interval(result, 'note_error_rate_pitch')}"),
        ("most common note baseline",
         f"{base['note_error_rate']} / {base['note_error_rate_pitch']}"),
        ("same measure, test split systems",
         f"{test.get('note_error_rate')} / {test.get('note_error_rate_pitch')}"),
        ("system TER, test split", str(result["system_ter_test"])),
        ("valid rate", str(result["valid_rate"])),
        ("systems found / true (pages within 0.95-1.05)",
         f"{ratio['overall']} ({ratio['pages_within_0.95_1.05']})"),
        ("pages per second", str(result["pages_per_second"])),
    ):  # fmt: skip
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
