"""The service's page and POST /engrave without a browser: the page's files and the headers
that confine them, the engraving gate (LilyPond never sees a text outside the canonical
grammar), its limits, and a check that the page's script never parses data as HTML.
tests/test_web_browser.py drives the page in Chromium."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import uvicorn
from infer_tiny import ROOT, SYSTEMS
from live_server import free_port, running

import sonfolio.serve
from sonfolio.score.common.lilypond import LilyPondNotFound
from sonfolio.serve import create_app
from sonfolio.web import engrave

WEB = ROOT / "sonfolio" / "web"
VALID = SYSTEMS[0]  # canonical, prints its time signature
CONTINUATION = r"\clef bass \key f \major c'2. | bes4 a4 g4"  # prints none: read in `time`
SCHEME = [
    r'\clef treble \key c \major \time 4/4 c\'1 #(system "touch pwned")',
    r'\clef treble \key c \major \time 4/4 c\'1 $(system "touch pwned")',
    r'#(system "ls")',
    r"$(ly:system '(\"ls\"))",
    r'\include "/etc/passwd"',
    '\\clef treble \\key c \\major \\time 4/4 c\'1\n#(system "ls")',
]


@pytest.fixture(scope="module")
def server(params):
    """The service without models (the page and /engrave need none), on a real socket."""
    serve = params.serve.model_copy(update={"max_concurrent_decodes": 1, "busy_timeout_s": 0.5})
    app = create_app(params.infer, serve, None, None, device="cpu")
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    with running(config) as client:
        yield client


@pytest.fixture
def lilypond_runs(monkeypatch):
    """Every command engrave runs (LilyPond's), recorded and still run."""
    calls, real = [], subprocess.run

    def spy(cmd, *args, **kwargs):
        calls.append(cmd)
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(engrave.subprocess, "run", spy)
    return calls


def test_the_page_is_served_with_a_csp_that_allows_only_its_own_origin(server):
    r = server.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["x-content-type-options"] == "nosniff"
    csp = dict(d.strip().split(" ", 1) for d in r.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == csp["script-src"] == csp["style-src"] == "'self'"
    assert csp["object-src"] == "'none'" and csp["frame-ancestors"] == "'none'"
    assert "unsafe" not in r.headers["content-security-policy"]
    html = r.text
    assert 'src="/web/app.js"' in html and 'href="/web/style.css"' in html
    # nothing the CSP would block: no inline script, style attribute or event handler
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="/web/app.js" defer>']
    assert not re.search(r"\sstyle=|\son[a-z]+=|<style|javascript:", html, flags=re.I)
    assert not re.search(r"(src|href)=\"(https?:)?//", html), "the page must load nothing remote"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/web/app.js", "text/javascript; charset=utf-8"),
        ("/web/style.css", "text/css; charset=utf-8"),
    ],
)
def test_the_script_and_style_are_served_with_their_types(server, path, kind):
    r = server.get(path)
    assert r.status_code == 200 and r.headers["content-type"] == kind
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.content == (WEB / Path(path).name).read_bytes()


def test_the_api_answers_carry_the_headers_too(server):
    r = server.get("/health")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in r.headers["content-security-policy"]


def test_the_page_script_never_parses_data_as_html_or_runs_strings():
    js = (WEB / "app.js").read_text()
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", js, flags=re.S)  # comments may name the APIs
    banned = (
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\s*\(|new\s+Function"
        r"|createContextualFragment|DOMParser|srcdoc|setTimeout\(\s*['\"`]"
        r"|setInterval\(\s*['\"`]|\.setAttribute\(\s*['\"]on|javascript:"
    )
    assert re.findall(banned, code) == []
    assert "textContent" in code  # how it does show data


def test_the_page_files_are_package_data():
    """`pip install .` (not only -e) ships every file the page serves."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = meta["tool"]["setuptools"]["package-data"]["sonfolio"]
    for name in ("index.html", "app.js", "style.css"):
        assert any(fnmatch.fnmatch(f"web/{name}", g) for g in globs), f"{name} not in package-data"


def test_a_canonical_system_is_engraved_as_svg(server, lilypond_runs):
    r = server.post("/engrave", json={"text": VALID})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/svg+xml"
    assert r.headers["content-security-policy"].startswith("default-src 'none'")
    assert r.headers["x-content-type-options"] == "nosniff"
    svg = r.text
    assert "<svg" in svg and "<path" in svg  # cairo draws glyphs as paths: no font to fetch
    assert not re.search(r"<script|<foreignObject|\bon[a-z]+=|href=\"(?!#)", svg, re.I)
    assert len(lilypond_runs) == 1


def test_a_continuation_system_is_engraved_in_the_time_in_force(server):
    r = server.post("/engrave", json={"text": CONTINUATION, "time": "3/4"})
    assert r.status_code == 200, r.text
    assert "<svg" in r.text


@pytest.mark.parametrize("text", SCHEME)
def test_scheme_and_includes_are_refused_with_422_unseen_by_lilypond(server, lilypond_runs, text):
    r = server.post("/engrave", json={"text": text})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("not engraved, not canonical LilyPond: token")
    assert lilypond_runs == []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"text": ""}, "empty text"),
        ({"text": "hello world"}, "not canonical LilyPond"),
        ({"text": CONTINUATION, "time": '3/4 #(system "ls")'}, "not a time signature"),
        ({"text": CONTINUATION, "time": "3/5"}, "not a time signature"),
    ],
)
def test_invalid_texts_and_times_are_refused_with_422_naming_why(server, lilypond_runs, body, why):
    r = server.post("/engrave", json=body)
    assert r.status_code == 422 and why in r.json()["detail"]
    assert lilypond_runs == []


def test_a_body_that_is_not_json_is_refused(server, lilypond_runs):
    # a cross-site form can post text/plain without asking: it must not reach LilyPond
    r = server.post("/engrave", content=f"text={VALID}", headers={"content-type": "text/plain"})
    assert r.status_code == 422 and lilypond_runs == []


def test_an_over_long_text_is_refused_with_413_naming_the_limit(server, lilypond_runs):
    long = VALID + " | g'4 a'4 b'4 c''4" * (engrave.MAX_TEXT_CHARS // 18)
    assert len(long) > engrave.MAX_TEXT_CHARS
    r = server.post("/engrave", json={"text": long})
    assert r.status_code == 413
    assert "MAX_TEXT_CHARS" in r.json()["detail"] and str(engrave.MAX_TEXT_CHARS) in r.text
    assert lilypond_runs == []


def test_engraving_waits_for_a_decode_slot_like_an_upload(server, monkeypatch):
    """With one slot held by a long engraving, a second one gets 503 busy, not a second
    LilyPond: engraving cannot starve the readers."""
    release, inside = threading.Event(), threading.Event()

    def held(text, time_, exe):
        inside.set()
        release.wait(30)
        return "<svg/>"

    monkeypatch.setattr(sonfolio.serve.engrave, "engrave_svg", held)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(server.post, "/engrave", json={"text": VALID})
        assert inside.wait(30)
        second = server.post("/engrave", json={"text": VALID})
        release.set()
        assert first.result().status_code == 200
    assert second.status_code == 503
    assert "serve.max_concurrent_decodes" in second.json()["detail"]


def test_without_lilypond_engraving_answers_503_saying_how_to_install_it(params, monkeypatch):
    def missing(configured=None):
        raise LilyPondNotFound("LilyPond was not found. Install it with `pip install lilypond`")

    monkeypatch.setattr(sonfolio.serve, "find_lilypond", missing)
    app = create_app(params.infer, params.serve, None, None)
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    with running(config) as client:
        r = client.post("/engrave", json={"text": VALID})
        assert r.status_code == 503 and "pip install lilypond" in r.json()["detail"]
        assert client.get("/").status_code == 200  # the rest of the service still works


def test_a_hung_lilypond_is_cut_off_at_the_timeout(tmp_path):
    hang = tmp_path / "lilypond"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    start = time.monotonic()
    with pytest.raises(engrave.NotEngravable, match="ran past 0.5 s"):
        engrave.engrave_svg(VALID, None, hang, timeout_s=0.5)
    assert time.monotonic() - start < 10
