"""Hostile image names never become LilyPond input: the `.ly` that `sonfolio read --format ly`
and `POST /read?format=ly` write (both through formats.read_lilypond) compiles with the real
LilyPond, and the Scheme hidden in a name (after a newline, in `#(...)`, `$(...)`, `%{`,
`\\include`, non-UTF-8 bytes) does not run: its marker file is never created."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from infer_tiny import SYSTEMS, TINY_INFER, merge, params_file, render_systems, score_model

from sonfolio.cli import main
from sonfolio.config.params import parse_params
from sonfolio.infer.formats import flat_text, read_lilypond
from sonfolio.score.common.page import Box
from sonfolio.score.decode.read import Reading, SystemText
from sonfolio.score.decode.read import problem as _problem
from sonfolio.serve import create_app

# Each touches a file named after its marker in the folder LilyPond runs in (the cwd).
HOSTILE = [
    'a\n#(system "touch pwned_newline")\n.png',
    'b\r#(system "touch pwned_cr")\r.png',
    'c\n$(system "touch pwned_dollar")\n.png',
    'd %{ #(system "touch pwned_block") %} .png',
    'e\n\\include "pwned_include.ly"\n.png',
    'f\u2028#(system "touch pwned_ls")\u2029.png',
    os.fsdecode(b'g\xff\xfe\n#(system "touch pwned_bytes")\n.png'),
    'h\n#(ly:system "touch pwned_ly")\n{ }\n.png',
]
FORBIDDEN = set('\n\r#$\\{}"%')


def compile_ly(lilypond: Path, text: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`text` written as the CLI writes it (UTF-8) and compiled by the real LilyPond in `cwd`."""
    cwd.mkdir(parents=True, exist_ok=True)
    src = cwd / "out.ly"
    src.write_text(text, encoding="utf-8")
    return subprocess.run(
        [str(lilypond), "-dno-print-pages", "-o", str(cwd / "out"), str(src)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("pwned*"))


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_is_flattened_to_one_line_of_plain_text(name):
    flat = flat_text(name)
    assert not FORBIDDEN & set(flat), flat
    assert flat.isprintable() and "\u2028" not in flat
    flat.encode("utf-8")  # no lone surrogates left from non-UTF-8 bytes


def test_the_marker_check_can_fail_a_name_left_raw_would_run_scheme(lilypond, tmp_path):
    """The control: LilyPond does run `#(system ...)`, so a missing marker below means
    something (the check is not one that cannot fail)."""
    done = compile_ly(lilypond, '\\version "2.24.3"\n#(system "touch pwned_control")\n', tmp_path)
    assert done.returncode == 0, done.stderr
    assert markers(tmp_path) == ["pwned_control"]


def test_hostile_names_compile_and_run_no_scheme(lilypond, tmp_path):
    hostile_text = '#(system "touch pwned_text") c\'4'
    results = []
    for i, name in enumerate(HOSTILE):
        systems = [
            SystemText(1, Box(0, 0, 10, 10), SYSTEMS[i % len(SYSTEMS)], None),
            SystemText(2, Box(0, 10, 10, 20), hostile_text, _problem(hostile_text)),
        ]
        results.append((name, Reading(systems, 0.0)))
    text = read_lilypond(results)
    done = compile_ly(lilypond, text, tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert markers(tmp_path) == []
    # Every image's canonical system compiled as a \score; each left-out one is a comment only.
    code = [line for line in text.splitlines() if not line.startswith("%")]
    assert sum(line.startswith("\\score") for line in code) == len(HOSTILE)
    comments = [line for line in text.splitlines() if line.startswith("% ")]
    assert sum("left out" in line for line in comments) == len(HOSTILE)
    # the left-out text is kept, on one comment line each (inert there: the markers prove it)
    assert sum(line == f"%   its text: {hostile_text}" for line in comments) == len(HOSTILE)
    names = [line for line in comments[1:] if "its text:" not in line]
    assert all("#" not in line and "\\include" not in line for line in names)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny untrained score model and a real engraving, saved under hostile file names."""
    root = tmp_path_factory.mktemp("hostile_ly")
    image = render_systems(SYSTEMS[:1])[0]
    names = [HOSTILE[0], HOSTILE[2], HOSTILE[6]]
    (root / "in").mkdir()
    for name in names:
        image.save(os.fsencode(root / "in" / name), format="PNG")
    return {
        "root": root,
        "model": score_model(root / "score"),
        "images": [root / "in" / n for n in names],
        "png": (root / "in" / names[0]).read_bytes(),
    }


def test_sonfolio_read_format_ly_with_hostile_file_names_runs_no_scheme(tiny, lilypond, tmp_path):
    out = tmp_path / "page.ly"
    argv = ["read", *map(str, tiny["images"]), "--model", str(tiny["model"]), "--format", "ly"]
    params = params_file(tmp_path, **TINY_INFER)
    argv += ["-o", str(out), "--params", str(params), "--threads", "1", "--device", "cpu"]
    code = main(argv)
    text = out.read_text(encoding="utf-8")
    assert len([line for line in text.splitlines() if " system 1 " in line]) == 3
    # an untrained model may read nothing valid: then exit 1 and a file that says so
    engraved = any(line.startswith("\\score") for line in text.splitlines())
    assert code == (0 if engraved else 1)
    assert engraved or text.splitlines()[1].startswith("% NOTHING ENGRAVED")
    done = compile_ly(lilypond, text, tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert markers(tmp_path) == []


def test_post_read_format_ly_with_a_hostile_upload_name_runs_no_scheme(
    tiny, lilypond, params, tmp_path
):
    raw = params.model_dump(mode="json")
    merge(raw["infer"], TINY_INFER)
    cfg = parse_params(raw)
    app = create_app(cfg.infer, cfg.serve, tiny["model"], None, threads=1, device="cpu")
    with TestClient(app) as client:
        files = {"file": (HOSTILE[0], tiny["png"], "image/png")}
        response = client.post("/read", files=files, params={"format": "ly"})
    assert response.status_code == 200, response.text
    assert "\n#(" not in response.text and "\n$(" not in response.text
    done = compile_ly(lilypond, response.text, tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert markers(tmp_path) == []


def test_a_left_out_text_is_kept_on_one_comment_line_and_runs_nothing(lilypond, tmp_path):
    """A model's text that is not canonical is kept in the .ly for the reader, but as a comment:
    every line break LilyPond (or an editor) knows is folded, so no part of it becomes input."""
    breaks = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\u2028", "\u2029"]
    texts = [f"c'4{b}#(system \"touch pwned_t{i}\"){b}d'4" for i, b in enumerate(breaks)]
    texts += ['%{ #(system "touch pwned_block") %}', os.fsdecode(b'e\'4 \xff\n$(system "x")')]
    systems = [SystemText(1, Box(0, 0, 10, 10), SYSTEMS[0], None)]
    systems += [SystemText(i + 2, Box(0, 10, 10, 20), t, _problem(t)) for i, t in enumerate(texts)]
    text = read_lilypond([("page.png", Reading(systems, 0.0))])
    kept = [line for line in text.splitlines() if line.startswith("%   its text: ")]
    assert len(kept) == len(texts)  # one line each, whatever line breaks the text held
    assert '#(system "touch pwned_t0")' in kept[0]  # kept as read, not mangled
    done = compile_ly(lilypond, text, tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert markers(tmp_path) == []


def test_a_reading_with_no_valid_system_says_nothing_is_engraved():
    bad = "c'4 {"
    systems = [SystemText(1, Box(0, 0, 10, 10), bad, _problem(bad))]
    lines = read_lilypond([("page.png", Reading(systems, 0.0))]).splitlines()
    assert lines[1].startswith("% NOTHING ENGRAVED")
    assert not any(line.startswith("\\score") for line in lines)
    ok = [SystemText(1, Box(0, 0, 10, 10), SYSTEMS[0], None)]
    assert "NOTHING ENGRAVED" not in read_lilypond([("page.png", Reading(ok, 0.0))])
