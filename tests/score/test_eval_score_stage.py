"""Stage eval@score end to end on a tiny trained model and its ONNX export: real LilyPond
renders as input, metrics per variant and split, side-by-side images, predictions, plots data."""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path

import numpy as np
import pytest
from eval_tiny import SHAPE, export, quality_csv, save_score
from PIL import Image

from sonfolio.config.params import Params
from sonfolio.io import read_jsonl, write_jsonl
from sonfolio.score.common.lilypond import compile_systems
from sonfolio.score.model.batches import load_image, to_pixel_values
from sonfolio.score.steps.eval import FACE as TRACK
from tasks.eval import run

H = r"\clef treble \key c \major \time 4/4 "
SYSTEMS = {
    "test": [H + "c'4 d'4 e'4 f'4 | g'1", H + "e'2 g'2 | c''1", H + "g'4 g'4 a'2 | b'1"],
    "heldout": [H + "c''1 | a'2 f'2", H + "d'4 f'4 a'4 c''4 | b'1"],
}


def make_data(root: Path, lilypond: Path) -> tuple[Path, list[str]]:
    """images/<split>/N.png (real renders, long side 128 px) + manifest.jsonl."""
    rows, texts = [], []
    for split, systems in SYSTEMS.items():
        done = compile_systems(systems, root / "render" / split, lilypond, resolution=100)
        assert done.returncode == 0, done.log
        (root / "data" / "images" / split).mkdir(parents=True)
        for i, (text, png) in enumerate(zip(systems, done.pngs, strict=True)):
            with Image.open(png) as raw:
                img = raw.convert("L")
            img.thumbnail((SHAPE[1], SHAPE[0]))
            rel = f"images/{split}/{i}.png"
            img.save(root / "data" / rel)
            rows.append({"image": rel, "text": text, "piece": f"p{i}", "split": split})
            texts.append(text)
    write_jsonl(root / "data" / "manifest.jsonl", rows)
    return root / "data", texts


@pytest.fixture(scope="module")
def evaluated(params: Params, lilypond: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("score_eval")
    data, texts = make_data(root, lilypond)
    rows = read_jsonl(data / "manifest.jsonl")
    pixels = to_pixel_values(np.stack([load_image(data / r["image"], *SHAPE) for r in rows]))
    torch_dir = save_score(root / "score_fp32", texts, pixels, steps=15, max_length=128)
    onnx_dir = export(torch_dir, root / "onnx" / "fp32", "image-to-text-with-past")
    cfg = params.score_eval.model_copy(
        update={
            "decode_max_tokens": 30,
            "threads": 1,
            "worst_examples": 1,
            "random_examples": 1,
            "compile_batch": 4,
            "render_dpi": 72,
            "batch_size": 2,
        }
    )
    out = root / "eval"
    metrics = run(cfg, TRACK, data, [torch_dir, onnx_dir], out, root / "metrics.json", lilypond)
    return metrics, out, root


@pytest.mark.slow
def test_metrics_per_variant_and_split(evaluated):
    metrics, _, root = evaluated
    assert json.loads((root / "metrics.json").read_text()) == metrics
    assert metrics["reference"] == "score_fp32"
    assert list(metrics["variants"]) == ["score_fp32", "fp32"]
    for name, entry in metrics["variants"].items():
        assert entry["kind"] == ("torch" if name == "score_fp32" else "onnx")
        assert set(entry["splits"]) == {"test", "heldout"}
        for split, m in entry["splits"].items():
            assert m["systems"] == len(SYSTEMS[split])
            assert 0.0 <= m["compile_rate"] <= 1.0 and m["ser"] >= 0.0
            counted = m["compiled"] + m["rejected_by_grammar"] + m["lilypond_errors"]
            assert counted + m["timeouts"] == m["systems"]
            assert set(m["errors_by_kind"]) >= {"pitch", "octave", "duration", "barline"}
            assert "delta_ser" in m and "delta_compile_rate" in m
            # how sure: resampled by piece (here each system its own piece)
            assert m["ser_ci95_over"] == f"{len(SYSTEMS[split])} pieces"
            low, high = m["ser_ci95"]
            assert low <= m["ser"] <= high
    # The ONNX export of the same weights decodes the same systems: no quality cost.
    assert metrics["variants"]["fp32"]["splits"]["test"]["delta_ser"] == 0.0


@pytest.mark.slow
def test_whole_pages_are_engraved_read_and_measured(evaluated, params: Params, lilypond: Path):
    """eval@score's pages: a part the data stage cut from pages, joined, engraved whole, cut
    and read as `read --page` reads it; figures named as the report and benchmark use them."""
    from sonfolio import variants
    from sonfolio.score.data.page_data import lines, take_apart, untied
    from sonfolio.score.eval.page_eval import evaluate_pages, heldout_parts, notes_of

    _, _, root = evaluated
    piece = H + " | ".join(["c'4 d'4 e'4 f'4", "g'2 g'2", "a'4 g'4 f'4 e'4", "d'1"] * 6)
    counts = [4] * 6
    text, _ = untied(take_apart(piece), counts)
    rows = [
        {"image": f"images/heldout/pages/abc-{k:03d}.png", "text": x.text, "time": x.time,
         "piece": "p", "collection": "c", "split": "heldout", "layout": "page"}
        for k, x in enumerate(lines(text, counts))
    ]  # fmt: skip
    parts = heldout_parts(list(reversed(rows)), "heldout", 5, 0)
    assert [r["image"] for r in parts[0]] == [r["image"] for r in rows]  # page order
    variant = variants.load(root / "onnx" / "fp32", threads=1)
    kinds = ("lilypond", "verovio:Leland", "verovio:Petaluma+scan")
    scan = params.score_data.scan
    kept = root / "kept"
    got = evaluate_pages(
        variant, parts, params.infer, lilypond, 100, root / "pages", kinds, scan, kept
    )
    for stem in ("lilypond", "verovio_leland", "verovio_petaluma_scan"):  # each engraving's page
        assert (kept / f"{stem}.png").is_file()
        assert json.loads((kept / f"{stem}.json").read_text())["found_systems"] >= 2
    # every page's figures beside them: what another run's pages are compared with
    pages = read_jsonl(kept / "rows.jsonl")
    assert {r["engraving"] for r in pages} == set(kinds)
    lily = [r for r in pages if r["engraving"] == "lilypond"]
    assert sum(r["distance"] for r in lily) / sum(r["truth_notes"] for r in lily) == pytest.approx(
        got["note_error_rate"], abs=1e-4
    )
    assert got["pages"] >= 1 and got["parts"] == 1 and got["true_systems"] >= 2
    assert got["truth_notes"] == len(notes_of(text)[0])
    assert got["systems_found_ratio"]["overall"] == 1.0  # the cutter finds every line
    assert 0.0 <= got["valid_rate"] <= 1.0 and got["note_error_rate"] >= 0.0
    assert set(got["baseline_most_common_note"]) == {"note_error_rate", "note_error_rate_pitch"}
    assert set(got["by_engraving"]) == set(kinds)
    assert {k: v for k, v in got["by_engraving"]["lilypond"].items()} == {
        k: v for k, v in got.items() if k != "by_engraving"
    }
    for name in kinds[1:]:  # another engraver's layout, clean and scan-like: every note placed
        other = got["by_engraving"][name]
        assert other["parts"] == 1 and other["truth_notes"] == got["truth_notes"], name
        assert other["true_systems"] >= 2, name
        assert other["systems_found_ratio"]["overall"] == 1.0, name


@pytest.mark.slow
def test_side_by_side_images_and_predictions(evaluated):
    _, out, _ = evaluated
    for variant in ("score_fp32", "fp32"):
        for split, systems in SYSTEMS.items():
            folder = out / "samples" / variant / split
            preds = read_jsonl(folder / "predictions.jsonl")
            assert [p["ref"] for p in preds] == systems
            assert {p["sample"] for p in preds} - {None} == {"worst_01", "random_01"}
            for name in ("worst_01", "random_01"):
                with Image.open(folder / f"{name}.png") as img:
                    # input + prediction (or "does not compile") + truth, stacked
                    assert img.height > 3 * 18 and img.width >= 400


@pytest.mark.slow
def test_quality_csv_for_dvc_plots(evaluated):
    _, out, _ = evaluated
    rows = quality_csv(out)
    runs = list(product(("score_fp32", "fp32"), ("test", "heldout")))  # variant-major
    assert [(r["variant"], r["split"]) for r in rows] == runs
    assert all(0.0 <= float(r["compile_rate"]) <= 1.0 for r in rows)


def test_a_speech_model_is_refused(params: Params, lilypond: Path, tmp_path: Path):
    from eval_tiny import save_speech

    from sonfolio.variants import VariantError

    data, _ = make_data(tmp_path, lilypond)
    speech = save_speech(tmp_path / "speech", params)
    with pytest.raises(VariantError, match="not a score model"):
        run(
            params.score_eval,
            TRACK,
            data,
            [speech],
            tmp_path / "eval",
            tmp_path / "m.json",
            lilypond,
        )
    assert not (tmp_path / "eval" / "samples").exists()  # no output that looks complete
