"""The service's page in a real browser: headless Chromium (Debian's chromium and chromedriver)
driven by Selenium against the real service with the tiny untrained models of
tests/infer_tiny.py, and against a stub service whose answers are hostile.

One browser for the module, with no network but 127.0.0.1 (every other host name resolves to
nothing) and a fresh profile. Waits are generous (a loaded 2-core machine starts Chromium
slowly); every assertion holds for whatever the untrained model reads.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, File, UploadFile
from fastapi.responses import JSONResponse, Response
from infer_tiny import SPEECH_WINDOW_S, SYSTEMS, TINY_INFER, merge, pages_and_models, speech_wav
from live_server import free_port, running
from PIL import Image

from sonfolio.config.params import parse_params
from sonfolio.serve import create_app
from sonfolio.web.page import add_page

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium: pip install -e '.[dev]'")
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(
        "no chromium or chromedriver on PATH: apt-get install chromium chromium-driver",
        allow_module_level=True,
    )

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

WAIT_S = 120
HOSTILE_NAME = "<img src=x onerror=alert(1)>.png"
HOSTILE_TEXT = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def chrome(profile: Path) -> webdriver.Chrome:
    """Headless Chromium that can reach 127.0.0.1 only and keeps its console log."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--window-size=1200,1400",
        f"--user-data-dir={profile}",
        # no host name resolves: a request to anywhere but the loopback service fails
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(WAIT_S)
    driver.set_script_timeout(WAIT_S)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[webdriver.Chrome]:
    driver = chrome(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def serving(app: FastAPI) -> Iterator[httpx.Client]:
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    with running(config) as client:
        yield client


@pytest.fixture(scope="module")
def files(tmp_path_factory, params) -> dict:
    root = tmp_path_factory.mktemp("web")
    files = pages_and_models(root, params)
    raw = params.model_dump(mode="json")
    # 60 tokens under the grammar: the untrained model writes canonical systems, so the page
    # engraves what it read (6 tokens end every system mid-way: all flagged, none engraved)
    merge(raw["infer"], TINY_INFER)["score"]["max_tokens"] = 60
    hostile = root / HOSTILE_NAME
    shutil.copyfile(files["system"], hostile)
    notes = root / "notes.txt"
    notes.write_text("not an image")
    Image.new("L", (400, 300), 255).save(root / "blank.png")
    return {
        **files,
        "cfg": parse_params(raw).infer,
        "clip": speech_wav(root / "clip.wav", seconds=1.5 * SPEECH_WINDOW_S),
        "hostile": hostile,
        "notes": notes,
        "blank": root / "blank.png",
    }


@pytest.fixture(scope="module")
def service(files, params) -> Iterator[httpx.Client]:
    app = create_app(
        files["cfg"], params.serve, files["score"], files["speech"], threads=1, device="cpu"
    )
    yield from serving(app)


def stub_app() -> FastAPI:
    """The page with a service whose every answer is hostile: markup in the names, the texts,
    the problems and the error details."""
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        model = {"loaded": True, "name": HOSTILE_TEXT, "kind": "torch", "device": "cpu"}
        return {"status": "ok", "models": {"score": model}, "versions": {}}

    @app.post("/read")
    def read(file: Annotated[UploadFile, File()]) -> dict:
        system = {"box": [0, 0, 20, 10], "time": None}
        return {
            "model": HOSTILE_TEXT,
            "image": file.filename,
            "deskew_deg": 0.0,
            "systems": [
                {**system, "index": 1, "text": HOSTILE_TEXT, "canonical": False,
                 "problem": "<b id=bold>" + HOSTILE_TEXT},
                {**system, "index": 2, "text": HOSTILE_TEXT, "canonical": True, "problem": None},
            ],
        }  # fmt: skip

    @app.post("/engrave")
    def engrave() -> JSONResponse:
        return JSONResponse({"detail": "<i id=italic>no</i>" + HOSTILE_TEXT}, 422)

    @app.post("/transcribe")
    def transcribe() -> Response:
        detail = {"detail": "busy: 1 uploads are being read (serve.max_concurrent_decodes)"}
        return JSONResponse(detail, 503, headers={"Retry-After": "60"})

    add_page(app)
    return app


@pytest.fixture(scope="module")
def stub() -> Iterator[httpx.Client]:
    yield from serving(stub_app())


def open_page(driver, client: httpx.Client) -> None:
    driver.get(str(client.base_url) + "/")
    wait(driver, "return document.getElementById('health').textContent.startsWith('service')")


def wait(driver, script: str, *args):
    """The value of `script` once it is truthy (up to WAIT_S)."""
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(
        lambda d: d.execute_script(script, *args)
    )


def choose(driver, input_id: str, path: Path) -> None:
    """Choose `path` in a file input (emptied first, so choosing the same file again is news)."""
    field = driver.find_element(By.ID, input_id)
    driver.execute_script("arguments[0].value = ''", field)
    field.send_keys(str(path))


def run_form(driver, button_id: str, status_id: str) -> str:
    """Click the form's button; its status's final state (done or error) once it has one."""
    driver.find_element(By.ID, button_id).click()
    return wait(
        driver,
        "const s = document.getElementById(arguments[0]).dataset.state;"
        "return (s === 'done' || s === 'error') && s",
        status_id,
    )


def engravings_settled(driver) -> None:
    busy = "[...document.querySelectorAll('.system')].some(c => c.dataset.engrave === 'busy')"
    wait(driver, f"return !{busy}")


def cards(driver) -> list[dict]:
    return driver.execute_script(
        """return [...document.querySelectorAll('#systems > li.system')].map(c => ({
            text: c.querySelector('.text').value,
            engrave: c.dataset.engrave || '',
            loaded: c.querySelector('.engraving').naturalWidth,
            imageShown: !c.querySelector('.engraving').hidden,
            problem: c.querySelector('.problem').hidden ? null
                : c.querySelector('.problem').textContent,
            crop: [c.querySelector('.crop').width, c.querySelector('.crop').height],
        }))"""
    )


def read_page(driver, service, files) -> None:
    """The page shows the reading of page.png (read now unless an earlier test left it)."""
    title = driver.execute_script("return document.getElementById('score-title')?.textContent")
    if (title or "").startswith("page.png:"):
        return
    open_page(driver, service)
    choose(driver, "score-file", files["page"])
    assert run_form(driver, "score-go", "score-status") == "done"
    engravings_settled(driver)


def test_reading_a_page_shows_each_system_its_crop_engraving_and_text(
    browser, service, files, tmp_path
):
    read_page(browser, service, files)
    browser.save_screenshot(str(tmp_path / "score.png"))
    data = files["page"].read_bytes()
    expected = service.post("/read", files={"file": ("page.png", data, "image/png")}).json()
    shown = cards(browser)
    assert len(shown) == len(expected["systems"]) == 3
    for card, system in zip(shown, expected["systems"], strict=True):
        left, top, right, bottom = system["box"]
        assert card["text"] == system["text"]
        assert card["crop"] == [right - left, bottom - top]
        if system["canonical"]:
            assert card["engrave"] == "done" and card["imageShown"] and card["loaded"] > 0
        else:
            assert card["engrave"] == "skipped" and not card["imageShown"]
            assert system["problem"] in card["problem"]
    title = browser.find_element(By.ID, "score-title").text
    assert title.startswith("page.png: 3 systems")
    assert browser.find_element(By.ID, "score-page").get_property("width") > 0


def test_an_edited_text_is_engraved_and_one_outside_the_grammar_is_refused(browser, service, files):
    """The page's own engraving on a known canonical text, whatever the model read."""
    read_page(browser, service, files)
    card = browser.find_element(By.CSS_SELECTOR, "#systems > li.system")
    text = card.find_element(By.CSS_SELECTOR, ".text")
    for value, outcome in ((SYSTEMS[1], "done"), ('#(system "ls")', "error")):
        browser.execute_script("arguments[0].value = arguments[1]", text, value)
        card.find_element(By.CSS_SELECTOR, ".engrave").click()
        assert wait(browser, "return arguments[0].dataset.engrave !== 'busy'", card)
        assert card.get_attribute("data-engrave") == outcome
    status = card.find_element(By.CSS_SELECTOR, ".engrave-status").text
    assert "error 422" in status and "not canonical LilyPond" in status
    assert not card.find_element(By.CSS_SELECTOR, ".engraving").is_displayed()
    # the valid text's engraving loaded before the refused one hid it
    browser.execute_script("arguments[0].value = arguments[1]", text, SYSTEMS[1])
    card.find_element(By.CSS_SELECTOR, ".engrave").click()
    wait(browser, "return arguments[0].dataset.engrave === 'done'", card)
    assert (
        browser.execute_script("return arguments[0].querySelector('.engraving').naturalWidth", card)
        > 0
    )


def test_the_ly_download_is_the_services_lilypond(browser, service, files, tmp_path):
    read_page(browser, service, files)
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    browser.find_element(By.ID, "score-ly").click()
    assert wait(browser, "return document.getElementById('score-status').dataset.state !== 'busy'")
    link = browser.find_element(By.ID, "score-ly-link")
    assert link.get_attribute("download") == "page.ly"
    assert link.get_attribute("href").startswith("blob:http://127.0.0.1")
    saved = tmp_path / "page.ly"
    WebDriverWait(browser, WAIT_S).until(lambda _: saved.is_file() and saved.stat().st_size)
    assert saved.read_text().startswith("% Read by `sonfolio read`")
    assert "\\version" in saved.read_text()


def test_an_error_is_shown_in_words_and_the_file_stays_chosen(browser, service, files):
    open_page(browser, service)
    choose(browser, "score-file", files["notes"])
    assert run_form(browser, "score-go", "score-status") == "error"
    status = browser.find_element(By.ID, "score-status").text
    assert status.startswith("error 415") and "notes.txt is not an image" in status
    assert "read it again" in status
    assert browser.find_element(By.ID, "score-go").is_enabled()  # retry at once


def test_a_speech_clip_plays_and_its_transcript_and_chunks_are_shown(
    browser, service, files, tmp_path
):
    open_page(browser, service)
    browser.find_element(By.ID, "tab-speech").click()
    choose(browser, "speech-file", files["clip"])
    audio = browser.find_element(By.ID, "speech-audio")
    assert audio.is_displayed() and audio.get_attribute("src").startswith("blob:")
    assert run_form(browser, "speech-go", "speech-status") == "done"
    browser.save_screenshot(str(tmp_path / "speech.png"))
    data = files["clip"].read_bytes()
    expected = service.post("/transcribe", files={"file": ("clip.wav", data, "audio/wav")}).json()
    transcript = browser.find_element(By.ID, "transcript").get_property("textContent")
    assert transcript == expected["text"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#chunks tbody tr")
    assert len(rows) == len(expected["chunks"]) == 2
    for row, chunk in zip(rows, expected["chunks"], strict=True):
        when, said = row.find_elements(By.TAG_NAME, "td")
        start, end = (float(t) for t in when.text.split("–"))
        assert start == pytest.approx(chunk["start"], abs=0.006)
        assert end == pytest.approx(chunk["end"], abs=0.006)
        assert said.get_property("textContent") == (
            "no speech" if chunk["no_speech"] else chunk["text"]
        )


def test_a_page_with_no_staff_says_so(browser, service, files):
    open_page(browser, service)
    choose(browser, "score-file", files["blank"])
    browser.find_element(By.CSS_SELECTOR, "input[name=page][value=true]").click()
    assert run_form(browser, "score-go", "score-status") == "done"
    note = browser.find_element(By.ID, "score-note")
    assert note.is_displayed() and note.text.startswith("No staff was found in this image")
    assert browser.find_elements(By.CSS_SELECTOR, "#systems > li") == []
    assert not browser.find_element(By.ID, "score-page").is_displayed()


def no_markup_ran(driver) -> None:
    """Nothing the hostile strings hold became an element, ran, or opened an alert."""
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 (raises when there is no alert)
    assert driver.execute_script("return window.pwned") is None
    made = "img:not(.engraving), script:not([src]), b, i, [onerror]"
    assert driver.execute_script(f"return document.querySelectorAll('{made}').length") == 0


def test_a_hostile_file_name_is_shown_as_text(browser, service, files):
    open_page(browser, service)
    choose(browser, "score-file", files["hostile"])
    assert HOSTILE_NAME in browser.find_element(By.ID, "score-chosen").text
    assert run_form(browser, "score-go", "score-status") == "done"
    assert browser.find_element(By.ID, "score-title").text.startswith(HOSTILE_NAME + ": 1 system")
    no_markup_ran(browser)


def test_hostile_model_text_problems_and_errors_are_shown_as_text(browser, stub, files):
    open_page(browser, stub)
    assert HOSTILE_TEXT in browser.find_element(By.ID, "health").text
    choose(browser, "score-file", files["hostile"])
    assert run_form(browser, "score-go", "score-status") == "done"
    engravings_settled(browser)
    first, second = cards(browser)
    assert first["text"] == second["text"] == HOSTILE_TEXT
    assert (
        first["problem"]
        == "Not valid canonical LilyPond, so not engraved: <b id=bold>" + HOSTILE_TEXT
    )
    assert second["engrave"] == "error"
    status = browser.find_elements(By.CSS_SELECTOR, ".engrave-status")[1].text
    assert status == f"not engraved: error 422 (refused): <i id=italic>no</i>{HOSTILE_TEXT}"
    no_markup_ran(browser)


def test_a_busy_service_is_shown_in_words(browser, stub, files):
    open_page(browser, stub)
    browser.find_element(By.ID, "tab-speech").click()
    choose(browser, "speech-file", files["clip"])
    assert run_form(browser, "speech-go", "speech-status") == "error"
    status = browser.find_element(By.ID, "speech-status").text
    assert status.startswith("error 503") and "serve.max_concurrent_decodes" in status
    assert browser.find_element(By.ID, "speech-go").is_enabled()


def test_the_page_loaded_nothing_but_its_own_origin_and_broke_no_csp_rule(browser, stub, files):
    open_page(browser, stub)
    choose(browser, "score-file", files["hostile"])
    assert run_form(browser, "score-go", "score-status") == "done"
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert any(u.endswith("/web/app.js") for u in loaded)
    assert all(u.startswith((str(stub.base_url), "blob:")) for u in loaded), json.dumps(loaded)
    # every console message of the session so far (this module's tests share the browser)
    log = [e["message"] for e in browser.get_log("browser")]
    assert [m for m in log if "Content Security Policy" in m] == [], log
