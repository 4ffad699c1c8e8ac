"""Score data and training settings, each run through the pipeline's own score stages and read
as eval@score reads them: which one reads the held-out music better.

Run:    python -m benchmarks.score_settings --root RUN [--only NAME ...] [--params FILE]
        python -m benchmarks.score_settings --runs NAME=FOLDER ... (finished pipeline runs'
        figures as rows beside; with --runs, settings run only where --only names them)
Reads:  this checkout's params.yaml (or FILE), each setting's overrides on top (SETTINGS
        below); RUN is a pipeline run's folder (its data@score output is linked where a
        setting changes only score_train).
Writes: benchmarks/results/score_settings.json and prints a table: per setting, the training
        stage's test / held-out TER (greedy CTC), eval@score's SER of the FP32 PyTorch model
        (constrained decoding) and its whole held-out pages' note error per engraving (read
        by score_eval.pages.variant, int8_ptq by default, as `sonfolio read --page` reads),
        and what the FP32 model's held-out readings make of the rhythms: dotted durations
        and triplets in the truth against those written, and the SER of the systems that
        hold a triplet; the training minutes; `pages_vs_root`: its page note rates minus
        RUN's on the same pages, per engraving, with the paired 95 % interval over the parts
        (where both evals kept their page rows: a difference whose interval holds 0 is not
        told apart from the pages drawn; another seed is another draw again, `seed_0`).

Each setting runs in RUN/benchmarks/score_settings/<name>/ (params.yaml with its overrides) as
the stages do, each in a fresh process: `python -m tasks.data score` (unless only score_train
changes), `tasks.tokenizer score`, `tasks.train score`, `tasks.qat score`, `tasks.export
score`, `tasks.eval score`: the score half of the pipeline. About an hour and a quarter a
setting on 2 cores (data ~10 min, training ~40, QAT ~3, export and eval ~12); the results
are written after each setting, so a long run keeps what it measured. Val, test and held-out
texts are the same in every setting (the rhythm additions touch train only) but `more_music`'s,
whose val and test pieces are drawn from the larger collections.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

import benchmarks
from benchmarks import console, earlier_result, override, publish, run_stage, settings_parser
from sonfolio import cpu
from sonfolio.io import read_jsonl

RESULTS = Path("benchmarks/results/score_settings.json")
REPO = Path(__file__).resolve().parents[1]
ENGRAVINGS = ("lilypond", "verovio:Leland", "lilypond+scan", "verovio:Leland+scan")

# name -> params overrides (dotted keys under score_data, score_train or score_qat),
# relative to today's params.yaml
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "triplets_0.3": {"score_data.triplets": 0.3},
    "dotted_0.3": {"score_data.dotted": 0.3},
    "triplets_dotted_0.3": {"score_data.triplets": 0.3, "score_data.dotted": 0.3},
    # cut time: train systems printing a meter print 2/2 on 25 of 1,954, held-out ones on 23 of 104
    "cut_time_0.3": {"score_data.cut_time": 0.3},
    # room in height at the same width: 73 % of the train images Verovio engraves are taller
    # than 96 px at 640 wide and are scaled down whole (to 0.73 of the width on average)
    "height_128": {"score_train.model.image_height": 128},
    # 1.5x the pixels along a line (a dense system's staff ~24 px tall instead of ~16, a dot
    # 2-3 px) and room for it in height (at 96 px a taller image is scaled down whole, as
    # Verovio's systems already are: median 128-169 px tall at 640 wide): 2x the pixels
    "long_side_960": {
        "score_data.image_long_side": 960,
        "score_data.resolution_dpi": 220,
        "score_train.model.image_height": 128,
    },
    # the default again with another draw of the weights' initialisation and of the batches
    # (the default's seed is 1 since 2026-11-29; every row above ran with seed 0): how far
    # apart two runs of the same setting read
    "seed_0": {"score_train.seed": 0},
    # the CTC head alone (conv blocks -> transformer layers -> CTC, a CRNN reader): the decoder,
    # which the CTC reading never runs, neither trained nor run on the labels (~30 % of a step)
    "ctc_only": {"score_train.ctc_weight": 1.0, "score_qat.ctc_weight": 1.0},
    # each train batch's images shrunk, moved, turned, faded and noised afresh every step:
    # the default's train loss ends near 0.53 where its val loss stops at 1.83 (13 epochs of
    # the same 7,352 images)
    "jitter": {"score_train.jitter.enabled": True},
    # its fade, noise and turn only: the crop's frame kept (no shrink, so no shift), as every
    # val, test and held-out image is cropped to its ink
    "jitter_frame_kept": {"score_train.jitter.enabled": True, "score_train.jitter.scale": 0.0},
    # 30 % of the train pages show their back's print through before the cut: ghost staves
    # between and across a page line's own, which the scan-like pages lose notes to
    "page_bleed_0.3": {"score_data.pages.bleed": 0.3},
    # and the scan-like train systems' own ghosts moved 10-50 % of their height, off their lines
    "ghost_shift": {"score_data.pages.bleed": 0.3, "score_data.augment.bleed_shift": [0.1, 0.5]},
    # the page lines of every split cut as they are read (infer.score.page.own_ink_only): each
    # line's image keeps only its staff's ink, no title or neighbour's notes in its box; 2,101 of
    # the 7,352 train systems are page lines, and the test split's 227 are read as cut
    "own_ink_pages": {"score_data.pages.cut.own_ink_only": True},
    # half the train pages made scan-like whole before they are cut (2-4 shape-keeping kinds):
    # a train line then holds thresholded ghost ink between its staves as a held-out scan's
    # does (today ~5 % of the page lines: pages.bleed 0.3, then thresholded as a system)
    "page_scan_0.5": {"score_data.pages.scan": 0.5},
    # every train page made scan-like whole (the default since 2026-11-30: half): the clean
    # page lines then come only from the system-level draws (augment.scan leaves 0.6 clean)
    "page_scan_1.0": {"score_data.pages.scan": 1.0},
    # twice the Essen folk tunes and the Bach chorales (synthetic systems stay a quarter of all):
    # the default's train loss ends near 0.5 where its val loss stops at ~1.87, 13 epochs of
    # the same 7,352 images; the held-out Irish tunes are drawn as before. The test split's
    # pieces are drawn anew (compare its TER per collection)
    "more_music": {
        "score_data.sources": [
            {"name": "folk", "music21": "essenFolksong", "max_pieces": 1000},
            {"name": "bach", "music21": "bach", "max_pieces": 200},
            {"name": "mozart", "music21": "mozart", "max_pieces": 8},
            {"name": "haydn", "music21": "haydn", "max_pieces": 5},
            {"name": "irish", "music21": "oneills1850", "max_pieces": 60},
        ]
    },
}
_DOTTED = re.compile(r"(?<=[a-gr',])[0-9]+\.+")
_EIGHTH_DOTTED = re.compile(r"(?<=[a-gr',])8\.(?!\.)")
_TUPLET = re.compile(r"\\tuplet ")


def _override(params: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    return override(
        params, overrides, ("score_data", "score_train", "score_qat"), "benchmarks.score_settings"
    )


def run_setting(
    root: Path, name: str, overrides: dict[str, Any], base: Path = REPO / "params.yaml"
) -> Path:
    """The score stages in RUN/benchmarks/score_settings/<name>/ under `base` (a params.yaml)
    with `overrides`; the folder."""
    from sonfolio.config.params import load_params

    work = root / "benchmarks" / "score_settings" / name
    work.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load(base.read_text(encoding="utf-8"))
    (work / "params.yaml").write_text(yaml.safe_dump(_override(params, overrides)), "utf-8")
    paths = load_params(work / "params.yaml").paths
    data = paths.track("score").data
    if all(k.startswith(("score_train.", "score_qat.")) for k in overrides):
        # the run's data and the data stage's metrics beside it (what `figures` counts)
        if not (work / data).exists():
            (work / data).parent.mkdir(parents=True, exist_ok=True)
            (work / data).symlink_to((root / data).resolve(), target_is_directory=True)
        counts = Path(paths.metrics) / "score_data.json"
        (work / counts).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / counts, work / counts)
    else:
        run_stage(work, "tasks.data", "score")
    for task in ("tasks.tokenizer", "tasks.train", "tasks.qat", "tasks.export", "tasks.eval"):
        run_stage(work, task, "score")
    return work


def rhythms(predictions: list[dict[str, Any]]) -> dict[str, Any]:
    """Dotted durations and triplets in the truth against the reading, and the SER of the
    systems that hold a triplet against the rest (eval@score's predictions.jsonl rows)."""
    tuplet = [r for r in predictions if "\\tuplet" in r["ref"]]
    plain = [r for r in predictions if "\\tuplet" not in r["ref"]]

    def ser(rows: list[dict[str, Any]]) -> float | None:
        return round(sum(r["ser"] for r in rows) / len(rows), 4) if rows else None

    def count(pattern: re.Pattern[str], key: str, rows: list[dict[str, Any]]) -> int:
        return sum(len(pattern.findall(r[key])) for r in rows)

    return {
        "dotted_truth": count(_DOTTED, "ref", predictions),
        "dotted_written": count(_DOTTED, "hyp", predictions),
        "dotted_eighths_truth": count(_EIGHTH_DOTTED, "ref", predictions),
        "dotted_eighths_written": count(_EIGHTH_DOTTED, "hyp", predictions),
        "triplet_systems": len(tuplet),
        "triplets_truth": count(_TUPLET, "ref", tuplet),
        "triplets_written": count(_TUPLET, "hyp", tuplet),
        "ser_triplet_systems": ser(tuplet),
        "ser_other_systems": ser(plain),
    }


def figures(work: Path) -> dict[str, Any]:
    """What the setting's stages measured (module docstring)."""
    from sonfolio.config.commands import InferParams
    from sonfolio.config.sections import read_sections

    params = read_sections(InferParams, work / "params.yaml")  # the paths (of any version)
    metrics, paths = work / params.paths.metrics, params.paths.track("score")
    trained = json.loads((metrics / "score_train.json").read_text(encoding="utf-8"))
    evaluated = json.loads((metrics / "score_eval.json").read_text(encoding="utf-8"))
    data = json.loads((metrics / "score_data.json").read_text(encoding="utf-8"))
    fp32 = evaluated["variants"][paths.model.name]["splits"]
    held = read_jsonl(
        work / paths.eval / "samples" / paths.model.name / "heldout" / "predictions.jsonl"
    )
    return {
        "triplet_systems_trained": data.get("triplet_systems", 0),
        "dotted_systems_trained": data.get("dotted_systems", 0),
        "test_ter": trained["test_ter"],
        "heldout_ter": trained["heldout_ter"],
        "test_ter_by_collection": {
            k: v["ter"] for k, v in trained["test_ter_by_collection"].items()
        },
        "ser": {split: fp32[split]["ser"] for split in fp32},
        "pages": {
            name: {
                k: e.get(k)
                for k in (
                    "note_error_rate",
                    "note_error_rate_ci95",
                    "note_error_rate_pitch",
                    "valid_rate",
                )
            }  # fmt: skip
            for name, e in evaluated["pages"]["by_engraving"].items()
        },
        "heldout_rhythms": rhythms(held),
        "train_minutes": trained["train_minutes"],
        "steps": trained["steps"],
    }


def page_rows(run: Path) -> list[dict[str, Any]] | None:
    """Every held-out page's figures as eval@score wrote them in `run`; None where that eval
    predates them."""
    from sonfolio.config.commands import InferParams
    from sonfolio.config.sections import read_sections
    from sonfolio.score.eval.page_eval import ROWS

    if not (run / "params.yaml").is_file():
        return None
    paths = read_sections(InferParams, run / "params.yaml").paths.track("score")
    found = run / paths.eval / "samples" / "pages" / ROWS
    return read_jsonl(found) if found.is_file() else None


def against_root(work: Path, root: Path) -> dict[str, Any] | None:
    """The setting's page note rates minus the root run's on the same pages, per engraving,
    with the paired 95 % interval over the parts (page_eval.compare); None where either eval
    kept no page rows."""
    from sonfolio.score.eval.page_eval import compare

    mine, theirs = page_rows(work), page_rows(root)
    if mine is None or theirs is None:
        return None
    out = {}
    for name in dict.fromkeys(r["engraving"] for r in theirs):
        a = [r for r in theirs if r["engraving"] == name]
        b = [r for r in mine if r["engraving"] == name]
        out[name] = compare(a, b) if b else None
    return out


def table(result: dict[str, Any]) -> Table:
    t = Table(title="score settings as eval@score reads them (SER: FP32; pages: pages.variant)")
    cols = ["setting", "test TER", "held-out TER", "SER test / held-out",
            *[f"pages {e}" for e in ENGRAVINGS], "dots written", "triplets written",
            "SER triplet systems", "min"]  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col == "setting" else "right")
    for name, r in result["settings"].items():
        h = r["heldout_rhythms"]
        t.add_row(
            name,
            f"{r['test_ter']:.3f}",
            f"{r['heldout_ter']:.3f}",
            f"{r['ser'].get('test', 0):.3f} / {r['ser'].get('heldout', 0):.3f}",
            *[
                f"{r['pages'].get(e, {}).get('note_error_rate', float('nan')):.3f}"
                for e in ENGRAVINGS
            ],
            f"{h['dotted_written']} / {h['dotted_truth']}",
            f"{h['triplets_written']} / {h['triplets_truth']}",
            f"{h['ser_triplet_systems']}",
            f"{r['train_minutes']:.1f}",
        )
    return t


def main() -> None:
    parser = settings_parser(__doc__, SETTINGS, RESULTS)
    parser.add_argument(
        "--params", type=Path, default=REPO / "params.yaml",
        help="the params.yaml the settings override (this checkout's by default)",
    )  # fmt: skip
    parser.add_argument(
        "--runs", nargs="*", default=[], metavar="NAME=FOLDER",
        help="finished pipeline runs (dvc repro done) read as rows beside, nothing rerun",
    )  # fmt: skip
    args = parser.parse_args()
    result = earlier_result(args.out)
    load_before = cpu.load_average()
    for run in args.runs:
        name, sep, folder = run.partition("=")
        if not sep:
            raise SystemExit(f"benchmarks.score_settings: --runs {run!r}: write NAME=FOLDER")
        result["settings"][name] = {"run": folder, **figures(Path(folder))}
    if args.runs:
        publish(args.out, result, lambda r: console(200).print(table(r)))
    for name in [] if args.runs and args.only is None else args.only or list(SETTINGS):
        work = run_setting(args.root, name, SETTINGS[name], args.params)
        result["settings"][name] = {"overrides": SETTINGS[name], **figures(work)}
        result["settings"][name]["pages_vs_root"] = against_root(work, args.root)
        benchmarks.stamp_conditions(result, name, load_before)
        publish(args.out, result, lambda r: console(200).print(table(r)))


if __name__ == "__main__":
    main()
