"""The run report renders from the stages' metrics, every image, link and clip in it resolves
inside the report folder, and a missing input shows as a section naming its command."""

from __future__ import annotations

import csv
import json
import wave
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import pytest
from PIL import Image

from sonfolio.report.page import SUMMARY
from sonfolio.report.sources import Sources
from tasks.report import run

ROOT = Path(__file__).resolve().parents[1]


# --- reading the page back --------------------------------------------------------------------
class Links(HTMLParser):
    """Every src / href of the page, and the ids that #fragments may point to."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        for name in ("src", "href"):
            if a.get(name) is not None:
                self.refs.append((tag, a[name]))


def assert_links_resolve(out: Path) -> Links:
    page = Links()
    page.feed((out / "index.html").read_text(encoding="utf-8"))
    assert page.refs, "the page links nothing"
    for tag, ref in page.refs:
        if ref.startswith("#"):
            assert ref[1:] in page.ids, f"<{tag}> {ref}: no such id"
            continue
        url = urlparse(ref)
        assert not url.scheme and not url.netloc and not ref.startswith("/"), (
            f"<{tag}> {ref}: links must be relative, the report is self-contained"
        )
        target = (out / url.path).resolve()
        assert target.is_relative_to(out.resolve()), f"<{tag}> {ref} leaves the report folder"
        assert target.is_file(), f"<{tag}> {ref} does not resolve to a file"
    return page


def srcs(page: Links, tag: str) -> list[str]:
    return [ref for t, ref in page.refs if t == tag]


# --- a small run, shaped as the stages write it -----------------------------------------------
def train_metrics(rate: str, value: float, baseline: float) -> dict:
    return {
        "steps": 40, "best_step": 30, "train_minutes": 1.5, "epochs": 2.0, "parameters": 12345,
        "val_loss_first": 3.4658, "val_loss_best": 2.6147, "val_loss_last": 2.7,
        "train_loss_last": 2.33, "samples_per_s": 58.48, "tokens_per_s": 2317.4,
        f"test_{rate}": value, f"test_{rate}_constant_guess": baseline,
        "choices": {"device": "cpu (2 threads) (the first CUDA/ROCm device, else the CPU)"},
        "step_time": {
            "step_ms": 670.62, "forward_ms": 221.93, "forward_pct": 33.09,
            "backward_ms": 415.69, "backward_pct": 61.99, "optimizer_ms": 29.69,
            "optimizer_pct": 4.43, "data_wait_ms": 3.13, "data_wait_pct": 0.47,
            "other_ms": 0.18, "other_pct": 0.03,
        },
    }  # fmt: skip


def write_curves(live: Path, stage: str) -> None:
    for split, rows in (("train", [(10, 6.1), (20, 4.2), (30, 3.0)]), ("val", [(30, 3.3)])):
        folder = live / stage / "plots" / "metrics" / split
        folder.mkdir(parents=True)
        lines = ["step\tloss", *(f"{s}\t{v}" for s, v in rows)]
        (folder / "loss.tsv").write_text("\n".join(lines) + "\n")


def write_wav(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x00" * 1600)


def score_eval(root: Path) -> dict:
    folder = root / "eval/score/samples/int8_ptq/test"
    folder.mkdir(parents=True)
    preds = []
    for name in ("worst_01", "worst_02", "random_01"):
        Image.new("L", (64, 48), 255).save(folder / f"{name}.png")
        preds.append({"ser": 0.9, "compile": "compiled", "sample": name})
    preds.append({"ser": 0.1, "compile": "compiled", "sample": None})
    (folder / "predictions.jsonl").write_text("\n".join(json.dumps(p) for p in preds) + "\n")
    kept = root / "eval/score/samples/pages"  # eval@score's first page of each engraving
    kept.mkdir(parents=True)
    for stem, rate in (("lilypond", 0.4321), ("verovio_leland_scan", 0.6123)):
        Image.new("RGB", (90, 120), "white").save(kept / f"{stem}.png")
        meta = {"engraving": stem.replace("_", ":", 1), "note_error_rate": rate,
                "true_systems": 3, "found_systems": 3,
                "systems": [{"system": 1, "text": "\\clef treble c'1", "valid": True}]}  # fmt: skip
        (kept / f"{stem}.json").write_text(json.dumps(meta))

    def split(ser: float) -> dict:
        return {"ser": ser, "cer": 0.5, "exact_match": 0.0, "compile_rate": 1.0,
                "clean_compile_rate": 0.99, "delta_ser": ser - 0.9076, "systems": 3,
                "note_error_rate": 0.4321, "errors_by_kind": {"pitch": 3}}  # fmt: skip

    pages = {"variant": "int8_ptq", "split": "heldout", "pages": 14, "parts": 12,
             "true_systems": 40, "found_systems": 41, "valid_rate": 1.0,
             "systems_found_ratio": {"overall": 1.025, "pages_within_0.95_1.05": 0.9286},
             "note_error_rate": 0.5678, "note_error_rate_pitch": 0.4,
             "baseline_most_common_note": {"note_error_rate": 0.87},
             "pages_per_second": 2.5}  # fmt: skip
    leland = {"pages": 15, "true_systems": 44, "found_systems": 43, "valid_rate": 0.97,
              "note_error_rate": 0.6123, "note_error_rate_ci95": [0.55, 0.67],
              "note_error_rate_pitch": 0.5012,
              "baseline_most_common_note": {"note_error_rate": 0.88}}  # fmt: skip
    pages["by_engraving"] = {"lilypond": dict(pages), "verovio:Leland+scan": leland}
    return {
        "reference": "score_fp32",
        "variants": {
            "score_fp32": {
                "kind": "torch",
                "splits": {"test": {**split(0.9076), "ser_ci95": [0.85, 0.95]}},
            },
            "int8_ptq": {"kind": "onnx", "splits": {"test": split(0.9090)}},
        },
        "pages": pages,
    }


def speech_eval(root: Path) -> dict:
    write_wav(root / "data/speech/audio/test/000195.wav")
    worst = [
        {"audio": "data/speech/audio/test/000195.wav", "ref": "Lutter point cabinet.",
         "hyp": "C'est en mai.", "wer": 3.3333},
        {"audio": "data/speech/audio/test/gone.wav", "ref": "a", "hyp": "b", "wer": 1.0},
    ]  # fmt: skip
    split = {"wer": 1.0242, "cer": 0.7888, "delta_wer": 0.0, "clips": 2, "worst": worst}
    base = {"wer": 1.5, "cer": 0.9, "delta_wer": 0.4758, "clips": 2, "worst": worst}
    found = {"speech_fp32": {"kind": "torch", "splits": {"test": split}},
             "base_zero_shot": {"kind": "torch", "splits": {"test": base}}}  # fmt: skip
    return {"reference": "speech_fp32", "baselines": ["base_zero_shot"], "variants": found}


def bench(quality: str, peer: bool) -> dict:
    def variant(runtime: str, ms: float) -> dict:
        return {"runtime": runtime, "bytes": 4158219, "size_ratio": 0.33, "encoder_ms_p50": 5.0,
                "decoder_ms_per_token_p50": 1.2, "e2e_ms_p50": ms, "e2e_ms_p95": ms * 1.2,
                "speedup_vs_torch_fp32": 2.0, "rss_peak_mb": 300.0, quality: 0.8,
                f"{quality}_increase": 0.001, "status": "passed"}  # fmt: skip

    variants = {"torch_fp32": variant("torch", 123.45), "ort_int8_ptq": variant("ort", 61.5)}
    if peer:
        variants["ct2_int8"] = variant("ct2", 40.25)
    variants["ort_int8_qat"] = {"status": "not built: no models/x/int8_qat (run the export stage)"}
    conditions = {"samples": 16, "threads": 2, "machine": "x86_64", "cpu_count": 2,
                  "versions": {"onnxruntime": "1.31.1"}}  # fmt: skip
    return {"conditions": conditions, "variants": variants}


def estimate(track_name: str) -> dict:
    row = {"gpu": "H100 SXM", "provider": "SomeCloud", "usd_per_gpu_hour": 2.5, "speedup": 150.0,
           "assumed": True, "hours": {"max_steps": 0.01, "full_run": 0.5},
           "cost_usd": {"max_steps": 0.025, "full_run": 1.25}}  # fmt: skip
    track = {"seconds_per_step": 1.5, "device": "cpu", "parameters": 1, "effective_batch": 32,
             "targets": {"max_steps": 800, "full_run": 20000}, "rows": [row]}  # fmt: skip
    return {"prices": "sonfolio/gpu_prices.yaml", "tracks": {track_name: track}}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A repository root holding every input the report reads."""
    root = tmp_path / "repo"
    metrics = root / "metrics"
    metrics.mkdir(parents=True)
    files = {
        "score_train": train_metrics("ter", 0.7963, 0.7764),
        "speech_train": train_metrics("cer", 0.7888, 0.9418),
        "score_eval": score_eval(root),
        "speech_eval": speech_eval(root),
        "score_bench": bench("ter", peer=False),
        "speech_bench": bench("wer", peer=True),
        "score_export": {"torch_fp32_bytes": 12007952, "int8_ptq": {"bytes": 4158219,
                         "size_ratio": 0.3326, "status": "built", "route": "quantize_dynamic"}},
        "score_qat": {"int8": {"val_loss_best": 2.5}, "int4": {"val_loss_best": 2.7}},
        "estimate_score": estimate("score"),
        "estimate_speech": estimate("speech"),
    }  # fmt: skip
    for name, data in files.items():
        (metrics / f"{name}.json").write_text(json.dumps(data))
    for stage in ("score_train", "speech_train"):
        write_curves(root / "dvclive", stage)
    return root


def sources(root: Path) -> Sources:
    return Sources(
        metrics=root / "metrics",
        live=root / "dvclive",
        evals={"score": root / "eval/score", "speech": root / "eval/speech"},
        root=root,
    )


# --- tests ------------------------------------------------------------------------------------
def test_full_run_renders_every_part_with_resolving_links(run_dir, params):
    out = run_dir / "reports"
    summary = run(params.report, sources(run_dir), out)
    html = (out / "index.html").read_text(encoding="utf-8")
    page = assert_links_resolve(out)
    assert set(summary["missing"]) == {"dvc repro qat@speech", "dvc repro export@speech"}
    # training: the val loss first -> best, the step-time breakdown, the baseline
    assert "3.466 → 2.615" in html and "415.7" in html and "61.99" in html and "0.7764" in html
    # plots: both loss curves, quality per variant, latency per variant
    pngs = {Path(s).name for s in srcs(page, "img")}
    assert {"score_loss.png", "speech_loss.png", "score_quality.png", "score_latency.png",
            "speech_latency.png"} <= pngs  # fmt: skip
    # the eval's side-by-side images (worst, then random) with their SER, and the worst clip
    assert {"worst_01.png", "worst_02.png", "random_01.png"} <= pngs
    assert "worst_01 — SER 0.9, compiled" in html
    assert [Path(s).name for s in srcs(page, "audio")] == ["01_000195.wav"]
    assert "data/speech/audio/test/gone.wav" in html and "(file absent)" in html
    # bench: the measured variants, the CTranslate2 peer, an unbuilt variant's reason
    assert "123.5 / 148.1" in html and "ct2_int8" in html and "not built: no models/x" in html
    # QAT vs PTQ, the cost table, the run's conditions
    assert "QAT val loss best" in html and "H100 SXM" in html and "$1.25" in html
    assert "git commit" in html and "report made (UTC)" in html


def test_the_untouched_base_stands_beside_the_trained_model(run_dir, params):
    """Speech: the base before fine-tuning (zero-shot) and after, on the same clips."""
    out = run_dir / "reports"
    run(params.report, sources(run_dir), out)
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "Before and after training" in html
    table = html[html.index("Before and after training") :]
    table = table[: table.index("</table>")]
    for cell in ("base_zero_shot (before training)", "speech_fp32 (trained)", "1.5", "1.024"):
        assert cell in table, cell
    assert "-0.4758" in table and "-0.1112" in table  # trained minus before: WER, CER


def report_table(run_dir, params, title):
    """The HTML of the report's table whose caption starts with `title`."""
    out = run_dir / "reports"
    run(params.report, sources(run_dir), out)
    html = (out / "index.html").read_text(encoding="utf-8")
    table = html[html.index(title) :]
    return table[: table.index("</table>")]


def test_the_headline_has_its_interval_where_the_eval_gave_one(run_dir, params):
    table = report_table(run_dir, params, "Quality per variant (reference: score_fp32)")
    fp32 = table[table.index("<td>score_fp32</td>") : table.index("<td>int8_ptq</td>")]
    assert "<td>0.9076 (0.85 to 0.95)</td>" in fp32
    assert "<td>0.909</td>" in table[table.index("<td>int8_ptq</td>") :]  # none given: none


def test_whole_pages_stand_beside_the_systems_read_alone(run_dir, params):
    table = report_table(run_dir, params, "Whole pages read as")
    for cell in ("14 (12)", "41 / 40", "0.9286", "0.5678", "0.4321", "0.87"):
        assert cell in table, cell


def test_each_engraving_has_its_row_of_page_figures(run_dir, params):
    table = report_table(run_dir, params, "Whole pages per engraving")
    lily = table[table.index("<td>lilypond</td>") : table.index("verovio:Leland+scan")]
    for cell in ("14", "41 / 40", "0.5678", "0.87"):
        assert f"<td>{cell}</td>" in lily, cell
    other = table[table.index("verovio:Leland+scan") :]
    # the note error with its interval over the parts where the eval gave one
    for cell in ("15", "43 / 44", "0.97", "0.6123 (0.55 to 0.67)", "0.5012", "0.88"):
        assert f"<td>{cell}</td>" in other, cell


def test_one_page_per_engraving_is_shown_as_read(run_dir, params):
    out = run_dir / "reports"
    run(params.report, sources(run_dir), out)
    html = (out / "index.html").read_text(encoding="utf-8")
    shown = html[html.index("One held-out page per engraving") :]
    for stem, rate in (("lilypond", "0.4321"), ("verovio_leland_scan", "0.6123")):
        assert f"assets/pages/score/{stem}.png" in shown and rate in shown
        assert (out / "assets/pages/score" / f"{stem}.png").is_file()


def test_latency_csv_has_one_row_per_measured_variant(run_dir, params):
    out = run_dir / "reports"
    run(params.report, sources(run_dir), out)
    with (out / "speech_latency.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["variant"] for r in rows] == ["torch_fp32", "ort_int8_ptq", "ct2_int8"]
    assert rows[2]["e2e_ms_p50"] == "40.25" and rows[0]["size_mb"] == "4.158"


def test_missing_inputs_show_the_command_that_makes_them(tmp_path, params):
    root = tmp_path / "empty"
    (root / "metrics").mkdir(parents=True)
    out = root / "reports"
    summary = run(params.report, sources(root), out)
    html = (out / "index.html").read_text(encoding="utf-8")
    for track in ("score", "speech"):
        for step in ("train", "qat", "export", "bench", "eval", "estimate"):  # one stage per step
            assert f"not yet produced: run <code>dvc repro {step}@{track}</code>" in html
    assert len(summary["missing"]) == 12 and summary["images"] == 0
    assert_links_resolve(out)  # the nav's #fragments, even with no data
    with (out / "score_latency.csv").open() as f:
        assert list(csv.reader(f)) == [
            ["variant", "runtime", "size_mb", "e2e_ms_p50", "e2e_ms_p95", "encoder_ms_p50",
             "decoder_ms_per_token_p50", "speedup_vs_torch_fp32", "quality"]
        ]  # fmt: skip


def test_rerun_replaces_outputs_and_keeps_dvcs_gitignore(run_dir, params):
    out = run_dir / "reports"
    run(params.report, sources(run_dir), out)
    (out / ".gitignore").write_text("/index.html\n/assets\n")
    (run_dir / "metrics/score_bench.json").unlink()
    run(params.report, sources(run_dir), out)
    assert (out / ".gitignore").is_file()
    assert not (out / "assets/score_latency.png").exists(), "a stale plot survived the rerun"
    assert "dvc repro bench@score" in json.loads((out / SUMMARY).read_text())["missing"]
    assert [p.name for p in out.iterdir() if p.name.startswith(".report")] == []


def test_summary_holds_markdown_tables_for_the_prefect_ui(run_dir, params):
    out = run_dir / "reports"
    run(params.report, sources(run_dir), out)
    markdown = json.loads((out / SUMMARY).read_text())["markdown"]
    assert set(markdown) == {"score", "speech", "run"}
    assert "| variant | runtime | size MB |" in markdown["score"]
    assert "not yet produced: run `dvc repro qat@speech`" in markdown["speech"]


def test_report_of_this_repository_resolves(tmp_path, params):
    """The real outputs of this checkout, where the stages have run."""
    paths = params.paths
    if not list((ROOT / paths.metrics).glob("*_eval.json")):
        pytest.skip(f"no {paths.metrics}/*_eval.json here: run `dvc repro` first")
    src = Sources(
        metrics=ROOT / paths.metrics,
        live=ROOT / paths.live,
        evals={t: ROOT / paths.track(t).eval for t in paths.tracks},
        root=ROOT,
    )
    out = tmp_path / "reports"
    summary = run(params.report, src, out)
    page = assert_links_resolve(out)
    for path in (ROOT / paths.metrics).glob("*.json"):
        assert f"dvc repro {path.stem}" not in summary["missing"], f"{path} exists"
        track, _, step = path.stem.partition("_")  # metrics/<track>_<step>.json: <step>@<track>
        if track in paths.tracks:
            assert f"dvc repro {step}@{track}" not in summary["missing"], f"{path} exists"
    if (ROOT / paths.metrics / "score_eval.json").is_file():
        assert any("/samples/score/" in s for s in srcs(page, "img")), "no side-by-side images"


@pytest.mark.slow
def test_flow_publishes_the_tables_and_a_link_to_the_report(run_dir, params):
    from prefect.artifacts import Artifact
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import publish_results

    (run_dir / "params.yaml").write_text("paths: {report: reports}\n")
    # the harness's own 30 s for its API server to start ran out beside another job using both
    # cores (as in tests/test_flows.py): a longer limit costs nothing when it starts quickly
    with prefect_test_harness(server_startup_timeout=180):
        assert publish_results(str(run_dir)) == ["sonfolio-report"]  # no report yet: says so
        assert "run `dvc repro report`" in Artifact.get("sonfolio-report").data
        run(params.report, sources(run_dir), run_dir / "reports")
        keys = publish_results(str(run_dir))
        assert keys == ["sonfolio-score", "sonfolio-speech", "sonfolio-run", "sonfolio-report"]
        score = Artifact.get("sonfolio-score")
        link = Artifact.get("sonfolio-report")
    assert score.type == "markdown" and "| ort_int8_ptq | ort | 4.16 |" in score.data
    # Prefect stores a link artifact as the markdown [text](link)
    uri = (run_dir / "reports/index.html").resolve().as_uri()
    assert link.data.startswith("[Sonfolio run report") and f"]({uri})" in link.data
