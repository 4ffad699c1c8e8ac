"""The score track's data stage on a handful of real pieces, with real LilyPond."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sonfolio import tracks
from sonfolio.config.data import ScoreData, ScoreSource
from sonfolio.io import read_jsonl
from sonfolio.score.common.lilypond import LilyPondNotFound, Setting, compile_systems
from sonfolio.score.data.dataset import TooManySkipped, augment_seed, render_settings
from sonfolio.score.data.render import RenderJob, render_batch
from sonfolio.score.data.sources import SourceConfigError, music21_corpus_root
from tasks.data import run

SCORE = tracks.face("score", "data")


def tiny(cfg: ScoreData, **update) -> ScoreData:
    sources = [
        ScoreSource(name="folk", music21="essenFolksong", max_pieces=8),
        ScoreSource(name="bach", music21="bach", max_pieces=2),
        ScoreSource(name="irish", music21="oneills1850", max_pieces=2),
    ]
    split = cfg.split.model_copy(update={"val": 0.2, "test": 0.2})
    base = {
        "sources": sources,
        "split": split,
        "image_long_side": 320,
        "systems_per_process": 25,
        "workers": 2,
    }
    return cfg.model_copy(update={**base, **update})


def only(cfg: ScoreData, source: ScoreSource, **update) -> ScoreData:
    """`tiny(cfg, ...)` with `source` its one source, and no held-out collection: the
    configured ones name sources it no longer has, which score_data refuses. Its two or three
    pieces go to train and val (no test split): the stage refuses an empty val split, and the
    split is drawn by piece (with seed 0 these pieces fall in both)."""
    shares = {"heldout_collections": [], "val": 0.45, "test": 0.0}
    split = cfg.split.model_copy(update=shares)
    return tiny(cfg, sources=[source], split=split, **update)


@pytest.fixture(scope="module")
def built(tmp_path_factory, params):
    tmp = tmp_path_factory.mktemp("score")
    cfg = tiny(params.score_data)
    stats = run(cfg, SCORE, tmp / "cache", tmp / "data", tmp / "stats.json")
    return cfg, tmp / "data", read_jsonl(tmp / "data" / "manifest.jsonl"), stats


def test_manifest_rows_point_at_images_and_match_the_stats(built):
    _, out, rows, stats = built
    assert rows, "no systems were kept"
    assert all((out / r["image"]).is_file() for r in rows)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.png")) == sorted(
        r["image"] for r in rows
    )
    assert sum(stats["systems"].values()) == len(rows)
    # downstream stages depend on the manifest alone: it must change whenever an image does
    for r in rows:
        assert r["sha256"] == hashlib.sha256((out / r["image"]).read_bytes()).hexdigest()
    assert stats["synthetic_systems"] == sum(r["collection"] == "synthetic" for r in rows) > 0
    with Image.open(out / rows[0]["image"]) as img:
        assert img.mode == "L" and max(img.size) == 320


def test_splits_are_by_piece_and_heldout_is_whole_collections(built):
    _, _, rows, _ = built
    split_of_piece: dict[str, set[str]] = {}
    for r in rows:
        split_of_piece.setdefault(r["piece"], set()).add(r["split"])
    assert all(len(s) == 1 for s in split_of_piece.values()), "a piece spans two splits"
    assert {r["collection"] for r in rows if r["split"] == "heldout"} == {"irish"}
    assert all(r["split"] == "heldout" for r in rows if r["collection"] == "irish")
    assert {"train", "heldout"} <= {r["split"] for r in rows}


def test_every_stored_text_passes_lilypond_bar_checks(built, lilypond, tmp_path):
    _, _, rows, _ = built
    settings = [Setting(r["time"], r["bar"]) for r in rows]
    texts = [r["text"] for r in rows]
    result = compile_systems(texts, tmp_path, lilypond, render=False, settings=settings)
    assert result.returncode == 0, result.log[-2000:]
    # as on a page, most systems continue a piece: no time signature printed, a bar number
    continued = [r for r in rows if r["time"] is not None]
    assert continued and all(r"\time" not in r["text"].split(" | ")[0] for r in continued)
    assert all(r["bar"] > 1 for r in continued)
    bad = [(r["text"], w) for r, w in zip(rows, result.warnings, strict=True) if w]
    assert bad == []


def test_a_share_of_the_pieces_is_also_cut_from_pages(built):
    _, out, rows, stats = built
    lines = [r for r in rows if r["layout"] == "page"]
    assert lines and sum(stats["page_lines"].values()) == len(lines)
    # a page line keeps its piece's split, and continuation lines carry the time in force
    split_of = {r["piece"]: r["split"] for r in rows if r["layout"] == "system"}
    assert all(split_of.get(r["piece"], r["split"]) == r["split"] for r in lines)
    assert any(r["time"] for r in lines) and any(r["bar"] > 1 for r in lines)
    assert all(r["image"].startswith(f"images/{r['split']}/pages/") for r in lines)


def test_every_image_agrees_with_its_text(built, lilypond, tmp_path):
    """Re-render a sample of texts (train ones re-augmented with their seed), by LilyPond and
    by Verovio as the manifest says: same pixels."""
    cfg, out, rows, _ = built
    # page lines are checked by tests/score/test_page_data.py
    alone = [r for r in rows if r["layout"] == "system"]
    sample = random.Random(0).sample(alone, min(16, len(alone)))
    jobs = [
        RenderJob(
            r["text"],
            tmp_path / r["image"],
            augment_seed(cfg.seed, r["image"]) if r["split"] == "train" else None,
            Setting(r["time"], r["bar"]),
            r["engraver"],
        )
        for r in sample
    ]
    assert {r["engraver"].split(":")[0] for r in sample} == {"lilypond", "verovio"}
    assert render_batch(jobs, render_settings(cfg, lilypond)) == [None] * len(jobs)
    for r, job in zip(sample, jobs, strict=True):
        stored = np.asarray(Image.open(out / r["image"]))
        again = np.asarray(Image.open(job.dest))
        assert stored.shape == again.shape and (stored == again).all(), r["image"]


def test_only_the_train_split_is_augmented(built, lilypond, tmp_path):
    cfg, out, rows, _ = built
    train = next(r for r in rows if r["split"] == "train" and r["layout"] == "system")
    other = next(r for r in rows if r["split"] != "train" and r["layout"] == "system")
    jobs = [
        RenderJob(
            r["text"], tmp_path / r["image"], None, Setting(r["time"], r["bar"]), r["engraver"]
        )
        for r in (train, other)
    ]
    render_batch(jobs, render_settings(cfg, lilypond))
    clean = [np.asarray(Image.open(j.dest)) for j in jobs]
    stored = [np.asarray(Image.open(out / r["image"])) for r in (train, other)]
    assert clean[0].shape != stored[0].shape or (clean[0] != stored[0]).any()
    assert (clean[1] == stored[1]).all()


def own_corpus(folder: Path, good: int, corrupt: int) -> Path:
    """A user's folder: real MusicXML from music21's corpus, and files that are not music."""
    folder.mkdir(parents=True)
    chorales = sorted((music21_corpus_root() / "bach").glob("bwv1*.mxl"))[:good]
    for path in chorales:
        shutil.copy(path, folder / path.name)
    for i in range(corrupt):
        (folder / f"broken{i}.xml").write_text("<score-partwise><part id='P1'><measure")
    return folder


def test_corrupt_files_are_skipped_and_counted(params, tmp_path):
    folder = own_corpus(tmp_path / "mine", good=3, corrupt=1)
    cfg = only(
        params.score_data,
        ScoreSource(name="mine", folder=folder),
        synthetic_fraction=0.0,
        max_skip_fraction=0.5,
    )
    stats = run(cfg, SCORE, tmp_path / "cache", tmp_path / "out", tmp_path / "stats.json")
    assert stats["skipped_pieces"] == {"unparsable": 1}
    assert json.loads((tmp_path / "stats.json").read_text())["skipped_pieces"] == {"unparsable": 1}
    assert sum(stats["systems"].values()) > 0


def test_too_many_corrupt_files_fail_listing_them_and_leave_no_output(params, tmp_path):
    folder = own_corpus(tmp_path / "mine", good=2, corrupt=2)
    cfg = only(params.score_data, ScoreSource(name="mine", folder=folder), max_skip_fraction=0.1)
    with pytest.raises(TooManySkipped, match="2 of 4 pieces") as err:
        run(cfg, SCORE, tmp_path / "cache", tmp_path / "out", tmp_path / "stats.json")
    assert "broken0.xml" in str(err.value) and "broken1.xml" in str(err.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "stats.json").exists()
    assert not list(tmp_path.glob(".out.tmp-*"))


def test_missing_lilypond_fails_before_any_work_with_how_to_install(params, tmp_path):
    cfg = tiny(params.score_data, lilypond=str(tmp_path / "no-lilypond"))
    with pytest.raises(LilyPondNotFound, match="pip install lilypond"):
        run(cfg, SCORE, tmp_path / "cache", tmp_path / "out", tmp_path / "stats.json")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def archive(tmp_path) -> tuple[Path, str]:
    folder = own_corpus(tmp_path / "corpus", good=2, corrupt=0)
    zipped = Path(shutil.make_archive(str(tmp_path / "corpus"), "zip", folder))
    return zipped, hashlib.sha256(zipped.read_bytes()).hexdigest()


@pytest.mark.parametrize("as_url", [False, True])
def test_an_archive_source_is_fetched_verified_and_cached(params, tmp_path, archive, as_url):
    zipped, sha = archive
    where = zipped.as_uri() if as_url else str(zipped)
    source = ScoreSource(name="theirs", archive=where, sha256=sha)
    cfg = only(params.score_data, source, synthetic_fraction=0.0)
    cache = tmp_path / "cache"
    stats = run(cfg, SCORE, cache, tmp_path / "out", tmp_path / "stats.json")
    assert sum(stats["systems"].values()) > 0
    assert (cache / f"{sha}.zip").is_file()
    zipped.unlink()  # the second run needs no download: the verified copy is cached
    run(cfg, SCORE, cache, tmp_path / "out2", tmp_path / "stats2.json")


def test_an_archive_with_the_wrong_checksum_is_refused(params, tmp_path, archive):
    zipped, sha = archive
    wrong = "0" * 64
    source = ScoreSource(name="x", archive=str(zipped), sha256=wrong)
    cfg = only(params.score_data, source)
    with pytest.raises(SourceConfigError, match=f"has sha256 {sha}, but params.yaml expects"):
        run(cfg, SCORE, tmp_path / "cache", tmp_path / "out", tmp_path / "stats.json")
    assert not (tmp_path / "out").exists()


def test_each_piece_has_one_engraver_and_the_heldout_font_none(built):
    cfg, _, rows, _ = built
    alone = [r for r in rows if r["layout"] == "system"]
    by_piece: dict[str, set[str]] = {}
    for r in alone:
        by_piece.setdefault(r["piece"], set()).add(r["engraver"])
    assert all(len(e) == 1 for e in by_piece.values())
    used = {e for es in by_piece.values() for e in es}
    fonts = {f"verovio:{f}" for f in cfg.engravers.verovio_fonts}
    assert "lilypond" in used and used - {"lilypond"} <= fonts and used & fonts
    assert f"verovio:{cfg.engravers.heldout_font}" not in used


def test_the_engraver_share_follows_the_setting():
    from sonfolio.config.data import ScoreEngravers
    from sonfolio.score.data.dataset import engraver_of

    cfg = ScoreEngravers(
        lilypond=0.25, verovio_fonts=["Bravura", "Petaluma"], heldout_font="Leland"
    )
    drawn = Counter(engraver_of(f"piece{k}", cfg, 0) for k in range(4000))
    assert abs(drawn["lilypond"] / 4000 - 0.25) < 0.03
    assert set(drawn) == {"lilypond", "verovio:Bravura", "verovio:Petaluma"}
    only = cfg.model_copy(update={"lilypond": 1.0})
    assert {engraver_of(f"piece{k}", only, 0) for k in range(100)} == {"lilypond"}


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"heldout_font": "Bravura"}, "held-out font Bravura is also in verovio_fonts"),
        ({"verovio_fonts": []}, "verovio_fonts is empty"),
    ],
)
def test_engraver_settings_that_cannot_work_are_named(update, message):
    from pydantic import ValidationError

    from sonfolio.config.data import ScoreEngravers

    good = {"lilypond": 0.5, "verovio_fonts": ["Bravura"], "heldout_font": "Leland"}
    with pytest.raises(ValidationError, match=message):
        ScoreEngravers(**(good | update))


@pytest.mark.parametrize("kinds", [(0, 2), (3, 2), (2, 7)])
def test_a_scan_kinds_range_that_cannot_be_drawn_is_named(params, kinds):
    from pydantic import ValidationError

    raw = params.score_data.augment.model_dump() | {"scan_kinds": kinds}
    with pytest.raises(ValidationError, match=r"scan_kinds .*1 <= least <= most <= 6"):
        type(params.score_data.augment)(**raw)


@pytest.mark.parametrize("count", [1, 6])
def test_a_scan_like_train_image_gets_as_many_kinds_as_set(params, lilypond, monkeypatch, count):
    from sonfolio.score.data import render

    drawn = []

    def spy(gray, dpi, cfg, seed, kinds, bleed_shift):
        drawn.append(kinds)
        return gray

    monkeypatch.setattr(render, "scan_like", spy)
    augment = params.score_data.augment.model_copy(
        update={"scan_fraction": 1.0, "scan_kinds": (count, count)}
    )
    settings = render_settings(params.score_data.model_copy(update={"augment": augment}), lilypond)
    page = Image.new("L", (640, 96), 255)
    for seed in range(5):
        render.finish(page, settings, seed)
    assert [len(k) for k in drawn] == [count] * 5
    assert all(set(k) <= set(render.SYSTEM_SCAN_KINDS) and len(set(k)) == count for k in drawn)


def _staff(height: int, width: int, top: int) -> np.ndarray:
    """A white image holding five staff lines 8 px apart from row `top`."""
    page = np.full((height, width), 255, np.uint8)
    page[[top + 8 * i for i in range(5)], :] = 0
    return page


def _ghost_rows(out: np.ndarray, page: np.ndarray) -> set[int]:
    return {int(r) for r in np.nonzero(((out < page) & (page == 255)).any(axis=1))[0]}


def test_a_systems_ghost_moves_by_the_share_of_its_height_set(params):
    """score_data.augment.bleed_shift: the ghost staff lines of a scan-like system fall
    between and beside its own (as a page's back puts them), not on them."""
    from sonfolio.score.common.scan import scan_like

    page = _staff(100, 64, 30)
    lines = set(range(30, 63, 8))
    up, down = {r - 30 for r in lines}, {r + 30 for r in lines}
    seen = []
    for seed in range(8):
        out = scan_like(page, 150, params.score_data.scan, seed, ("bleed",), (0.3, 0.3))
        rows = _ghost_rows(out, page)
        assert rows in (up, down), rows  # five ghost lines, 30 rows away: none on its own
        seen.append(rows == up)
    assert any(seen) and not all(seen)  # up or down, drawn
    # null: at most 2 % of the height, so the ghost lines lie on the own lines or beside them
    out = scan_like(page, 150, params.score_data.scan, 0, ("bleed",))
    assert all(min(abs(r - line) for line in lines) <= 2 for r in _ghost_rows(out, page))


def test_a_bleed_shift_that_cannot_be_drawn_is_named(params):
    from pydantic import ValidationError

    raw = params.score_data.augment.model_dump() | {"bleed_shift": (0.5, 0.1)}
    with pytest.raises(ValidationError, match=r"bleed_shift \[0.5, 0.1\].*least <= most"):
        type(params.score_data.augment)(**raw)
