"""The HTTP service under real requests: a uvicorn server on 127.0.0.1, tiny models loaded by the
app's lifespan, uploads sent with httpx as a client program would send them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from infer_tiny import (
    ROOT,
    SPEECH_WINDOW_S,
    TINY_INFER,
    merge,
    pages_and_models,
    params_file,
    speech_wav,
)
from live_server import free_port, running

from sonfolio.config.params import parse_params
from sonfolio.serve import create_app, is_loopback

MAX_MB = 0.25  # the tests' upload limit: a page PNG fits, 1 MB does not


@pytest.fixture(scope="module")
def files(tmp_path_factory, params):
    files = pages_and_models(tmp_path_factory.mktemp("serve"), params)
    raw = params.model_dump(mode="json")
    merge(raw["infer"], TINY_INFER)
    return {
        **files,
        "cfg": parse_params(raw).infer,
        "serve": params.serve.model_copy(update={"max_upload_mb": MAX_MB}),
        "system": files["system"].read_bytes(),  # uploads: the PNG files' bytes
        "page": files["page"].read_bytes(),
        "wav": speech_wav(files["root"] / "clip.wav", seconds=1.5 * SPEECH_WINDOW_S).read_bytes(),
    }


@contextmanager
def serving(app):
    """`app` on a real uvicorn server in a thread, on a free port of 127.0.0.1; an httpx client."""
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    with running(config) as client:
        yield client


@pytest.fixture(scope="module")
def server(files):
    """Both tiny models, given as folders: the app's lifespan loads them."""
    app = create_app(
        files["cfg"], files["serve"], files["score"], files["speech"], threads=1, device="cpu"
    )
    with serving(app) as client:
        yield client


def upload(client, path, name, data, content_type, **params):
    return client.post(path, files={"file": (name, data, content_type)}, params=params)


def no_traceback(response):
    assert "Traceback" not in response.text and 'File "' not in response.text
    return response


def test_health_lists_both_models_and_versions(server):
    r = server.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["models"]["score"] == {
        "loaded": True,
        "name": "score",
        "kind": "torch",
        "device": "cpu",
    }
    assert body["models"]["speech"]["loaded"] is True
    assert {"sonfolio", "torch", "onnxruntime"} <= set(body["versions"])


DOCS = ("/docs", "/redoc", "/openapi.json")


@pytest.mark.parametrize(
    ("host", "setting", "shown"),
    [
        ("127.0.0.1", "loopback", True),
        ("::1", "loopback", True),
        ("0.0.0.0", "loopback", False),
        ("192.168.1.20", "loopback", False),
        ("0.0.0.0", "always", True),
        ("127.0.0.1", "never", False),
    ],
)
def test_versions_and_api_docs_are_shown_by_the_bind_and_their_params(files, host, setting, shown):
    """/health's versions and /docs, /redoc, /openapi.json: shown on a loopback bind, hidden off
    it (behind the proxy docs/inference.md recommends for --host 0.0.0.0), unless
    serve.versions / serve.api_docs say always or never. The app decides from serve.host; the
    socket here is loopback whatever it says."""
    serve = files["serve"].model_copy(
        update={"host": host, "versions": setting, "api_docs": setting}
    )
    with serving(create_app(files["cfg"], serve, None, None, device="cpu")) as client:
        health = client.get("/health").json()
        docs = {path: client.get(path).status_code for path in DOCS}
    assert ("versions" in health) is shown, health
    assert docs == dict.fromkeys(DOCS, 200 if shown else 404)


def test_loopback_is_every_address_only_this_machine_reaches():
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.5", "example.org"]))


def test_serve_host_on_the_command_line_reaches_the_app(files, monkeypatch):
    """`--host 0.0.0.0` is what the app hides by, not params.yaml's serve.host."""
    import sonfolio.serve
    from sonfolio.cli import main

    seen = {}

    def spy(cfg, serve, *args, **kwargs):
        seen["host"] = serve.host
        return create_app(cfg, serve, *args, **kwargs)

    monkeypatch.setattr(sonfolio.serve, "create_app", spy)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)  # not listening on 0.0.0.0
    params = params_file(files["root"], **TINY_INFER)
    argv = ["serve", "--params", str(params), "--host", "0.0.0.0"]
    assert main([*argv, "--score-model", str(files["score"]), "--threads", "1"]) == 0
    assert seen == {"host": "0.0.0.0"}


def test_serve_reads_only_its_sections_of_params(files, monkeypatch, capsys):
    """`sonfolio serve` validates `paths`, `infer`, `serve` and score_data.lilypond, as `read`
    validates its own: a training section from another version does not stop it; a bad
    serve setting does, named, before any model loads."""
    import yaml

    from sonfolio.cli import main

    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)
    path = params_file(files["root"], **TINY_INFER)
    raw = yaml.safe_load(path.read_text())
    del raw["score_data"]["triplets"]  # sections as another version of the project has them
    raw["speech_train"]["lr"] = "fast"
    path.write_text(yaml.safe_dump(raw))
    argv = ["serve", "--params", str(path), "--score-model", str(files["score"])]
    assert main([*argv, "--threads", "1"]) == 0
    raw["serve"]["max_upload_mb"] = -1
    path.write_text(yaml.safe_dump(raw))
    assert main([*argv, "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "serve.max_upload_mb" in err and "speech_train" not in err


def test_read_a_good_image(server, files):
    r = upload(server, "/read", "system.png", files["system"], "image/png")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["image"] == "system.png" and body["model"] == "score"
    assert len(body["systems"]) == 1 and isinstance(body["systems"][0]["text"], str)


def test_read_a_page_finds_three_systems_and_gives_lilypond(server, files):
    r = upload(server, "/read", "page.png", files["page"], "image/png")
    assert len(r.json()["systems"]) == 3
    whole = upload(server, "/read", "page.png", files["page"], "image/png", page="false")
    assert len(whole.json()["systems"]) == 1
    ly = upload(server, "/read", "page.png", files["page"], "image/png", format="ly")
    assert ly.headers["content-type"].startswith("text/x-lilypond")
    assert ly.text.count("% ") >= 3 and "\\version" in ly.text
    xml = upload(server, "/read", "page.png", files["page"], "image/png", format="musicxml")
    assert xml.headers["content-type"].startswith("application/vnd.recordare.musicxml+xml")
    assert b"<score-partwise" in xml.content


def test_transcribe_a_good_audio_file(server, files):
    r = upload(server, "/transcribe", "clip.wav", files["wav"], "audio/wav")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["duration"] == pytest.approx(1.5 * SPEECH_WINDOW_S, abs=0.01)
    assert len(body["chunks"]) == 2 and isinstance(body["text"], str)


def test_an_oversized_upload_is_refused_with_413(server):
    big = b"\x89PNG\r\n\x1a\n" + bytes(int(MAX_MB * 1024 * 1024) + 1)
    r = no_traceback(upload(server, "/read", "big.png", big, "image/png"))
    assert r.status_code == 413
    assert "limit" in r.json()["detail"]


def test_an_oversized_upload_without_a_length_is_cut_off_with_413(server):
    def body():  # chunked transfer: no Content-Length to check up front
        yield (
            b'--x\r\nContent-Disposition: form-data; name="file"; filename="big.png"\r\n'
            b"Content-Type: image/png\r\n\r\n"
        )
        for _ in range(8):
            yield bytes(64 * 1024)
        yield b"\r\n--x--\r\n"

    headers = {"content-type": "multipart/form-data; boundary=x"}
    r = no_traceback(server.post("/read", content=body(), headers=headers))
    assert r.status_code == 413


def test_a_non_image_sent_to_read_is_refused_with_415(server):
    r = no_traceback(upload(server, "/read", "notes.png", b"hello, not a picture", "image/png"))
    assert r.status_code == 415
    assert "notes.png is not an image" in r.json()["detail"]


def test_a_damaged_image_is_refused_with_400(server, files):
    r = no_traceback(upload(server, "/read", "cut.png", files["system"][:200], "image/png"))
    assert r.status_code == 400
    assert "cut.png" in r.json()["detail"]


def test_a_non_audio_file_sent_to_transcribe_is_refused_with_415(server, files):
    r = no_traceback(upload(server, "/transcribe", "song.wav", files["system"], "audio/wav"))
    assert r.status_code == 415
    assert "song.wav is not audio" in r.json()["detail"]


def test_a_request_without_a_file_is_refused_with_422(server):
    assert server.post("/read").status_code == 422


def test_a_track_without_a_model_answers_503(files):
    app = create_app(files["cfg"], files["serve"], files["score"], None, threads=1, device="cpu")
    with serving(app) as client:
        assert client.get("/health").json()["models"]["speech"] == {"loaded": False}
        r = upload(client, "/transcribe", "clip.wav", files["wav"], "audio/wav")
        assert r.status_code == 503 and "--speech-model" in r.json()["detail"]


@pytest.mark.slow  # a fresh interpreter importing torch and transformers: ~10-20 s
def test_sonfolio_serve_starts_on_loopback_and_answers(files):
    port = free_port()
    params = params_file(files["root"], **TINY_INFER)
    cmd = [sys.executable, "-m", "sonfolio.cli", "serve", "--port", str(port), "--params",
           str(params), "--score-model", str(files["score"]), "--speech-model",
           str(files["speech"]), "--threads", "1"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        # far: a fresh interpreter importing torch on a machine another job holds (the whole
        # suite at the lowest priority beside the main command) took past 90 s to answer;
        # the loop ends as soon as it answers or exits
        deadline, health = time.monotonic() + 600, None
        while health is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
            except httpx.TransportError:
                time.sleep(0.3)
        assert health is not None, proc.stdout.read().decode() if proc.poll() is not None else ""
        assert health["status"] == "ok"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_sonfolio_serve_with_a_missing_model_exits_2(files, capsys):
    from sonfolio.cli import main

    params = params_file(files["root"], **TINY_INFER)
    missing = files["root"] / "nothing"
    argv = ["serve", "--params", str(params), "--score-model", str(missing)]
    assert main(argv) == 2
    assert f"{missing} is not a folder" in capsys.readouterr().err


def test_a_model_failure_answers_500_without_a_traceback(files, tmp_path, caplog):
    """A processor that disagrees with its model (a canvas the encoder does not take)."""
    broken = tmp_path / "broken"
    shutil.copytree(files["score"], broken)
    config = json.loads((broken / "preprocessor_config.json").read_text())
    config["size"] = {"height": 64, "width": 64}
    (broken / "preprocessor_config.json").write_text(json.dumps(config))
    app = create_app(files["cfg"], files["serve"], broken, None, threads=1, device="cpu")
    with serving(app) as client:
        r = no_traceback(upload(client, "/read", "system.png", files["system"], "image/png"))
    assert r.status_code == 500
    assert r.json() == {"detail": "internal error (logged by the server)"}
    assert any("POST /read failed" in rec.getMessage() for rec in caplog.records)
