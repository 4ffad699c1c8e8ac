"""The real-voice set: built by the speech data stage from Debian's Asterisk French prompts (the
download path: `apt-get download` + `dpkg-deb -x` into a fresh cache), kept out of the training
manifest, read whole by every variant and the base, and gated against the base."""

from __future__ import annotations

import json
import shutil
import wave
from pathlib import Path

import pytest
from eval_tiny import save_speech  # tests/ is on sys.path

from sonfolio import tracks, variants
from sonfolio.config.params import Params
from sonfolio.io import file_sha256, read_jsonl
from sonfolio.report.items import Missing, Table
from sonfolio.report.quality import real_items
from sonfolio.speech.common.audio import decode
from sonfolio.speech.data import debian, real
from sonfolio.speech.decode.transcribe import transcribe
from sonfolio.speech.eval import real as real_eval
from sonfolio.speech.steps.report import FACE as REPORT
from tasks.data import run as data_run
from tasks.eval import run as eval_run

KEPT = 212  # of 1.6.1-1's 521 prompts, at min_words 5 and max_duration_s 30


@pytest.fixture(scope="module")
def real_set(params: Params, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    """(data folder, stats, download cache): the set built through the download path (an
    empty root: nothing counts as installed); skipped where the packages cannot be had."""
    root = tmp_path_factory.mktemp("real")
    cache = root / "cache"
    stats = real.build(params.speech_data.real, cache, root / "data", root=root / "empty")
    if "absent" in stats:
        pytest.skip(f"the real-voice packages cannot be had here: {stats['absent']}")
    return root / "data", stats, cache


def test_the_set_is_the_prompts_of_5_words_to_30_s_without_brackets(real_set):
    data, stats, cache = real_set
    rows = read_jsonl(data / real.FOLDER / "manifest.jsonl")
    assert len(rows) == stats["utterances"] == KEPT
    left = {"bracketed": 8, "few_words": 293, "no_audio": 7, "too_long": 1}
    assert stats["left_out"] == left and stats["prompts"] == KEPT + sum(left.values())
    assert stats["transcript_fixes"] == len(real.FIXES)  # every listed fix applied
    assert "downloaded 1.6.1-1" in stats["source"] and stats["license"] == "CC-BY-SA-3.0"
    assert sorted(p.name for p in cache.iterdir()) == sorted(p.filename for p in real.PACKAGES)
    assert len({r["prompt"] for r in rows}) == KEPT and {r["split"] for r in rows} == {"real"}
    prompts = {r["prompt"] for r in rows}
    assert not prompts & {"ascending-2tone", "beeperr", "tt-monkeys", "priv-callee-options"}
    assert "agent-user" in prompts and "confbridge-has-joined" not in prompts  # "... a joint"
    for r in rows:
        assert real.words(r["text"]) >= 5 and 0 < r["duration"] <= 30.0
        assert not real.BRACKETS.search(r["text"])
        assert "présentemnet" not in r["text"] and "ce tte" not in r["text"]
        assert r["speaker"] == "fr_CA_f_June"


def test_clips_are_16_khz_mono_pcm_matching_their_rows(real_set):
    data, stats, _ = real_set
    rows = read_jsonl(data / real.FOLDER / "manifest.jsonl")
    assert stats["manifest_sha256"] == file_sha256(data / real.FOLDER / "manifest.jsonl")
    for r in rows[:: len(rows) // 12]:
        path = data / r["audio"]
        assert r["audio"].startswith("real/audio/") and file_sha256(path) == r["sha256"]
        with wave.open(str(path)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            assert w.getnframes() / 16000 == pytest.approx(r["duration"], abs=1e-3)
        assert decode(path).std() > 0.01  # speech, not silence


@pytest.mark.slow
def test_installed_packages_are_read_in_place(real_set, params, tmp_path):
    """A root holding the packages' files (as dpkg installs them) is read without apt-get:
    the same set, byte for byte."""
    data, stats, cache = real_set
    root = tmp_path / "root"
    debs = [cache / p.filename for p in real.PACKAGES]
    with debian.unpacked(debs) as files:
        shutil.copytree(files, root)
    got = real.build(params.speech_data.real, tmp_path / "no-cache", tmp_path / "data", root=root)
    assert got["source"].endswith("installed (version unknown)")  # no dpkg record here
    assert got["manifest_sha256"] == stats["manifest_sha256"]
    assert not (tmp_path / "no-cache").exists()  # nothing fetched


@pytest.mark.slow
def test_the_data_stage_keeps_the_set_out_of_the_training_manifest(real_set, tiny_speech, tmp_path):
    _, _, cache = real_set
    out = tmp_path / "data"
    (tmp_path / "downloads" / "debian").mkdir(parents=True)
    for deb in cache.iterdir():  # the cache the stage fetches into: no second download
        shutil.copy(deb, tmp_path / "downloads" / "debian" / deb.name)
    cfg = tiny_speech(real=tiny_speech().real.model_copy(update={"enabled": True}))
    stats = data_run(
        cfg, tracks.face("speech", "data"), tmp_path / "downloads", out, tmp_path / "m.json"
    )
    rows = read_jsonl(out / "manifest.jsonl")
    assert {r["split"] for r in rows} == {"train", "val", "test"}
    assert not any(r["audio"].startswith("real/") for r in rows)
    assert stats["real"]["utterances"] == KEPT
    assert len(read_jsonl(out / "real" / "manifest.jsonl")) == KEPT


def test_without_apt_the_set_is_absent_and_says_what_to_install(params, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    got = real.build(params.speech_data.real, tmp_path / "cache", tmp_path / "d", root=tmp_path)
    assert "apt-get is not on PATH" in got["absent"]
    assert "apt-get install asterisk-core-sounds-fr-g722 asterisk-core-sounds-fr" in got["absent"]
    assert not (tmp_path / "d" / "real").exists()
    off = params.speech_data.real.model_copy(update={"enabled": False})
    assert real.build(off, tmp_path, tmp_path / "d") == {
        "absent": "speech_data.real.enabled is false"
    }


def test_a_deb_with_other_bytes_is_refused_naming_it(monkeypatch, tmp_path):
    (tmp_path / real.PACKAGES[1].filename).write_bytes(b"stale")  # not the pinned bytes

    def fake_download(package: debian.DebPackage, cache: Path) -> None:
        (cache / package.filename).write_bytes(b"not the pinned bytes")

    monkeypatch.setattr(debian, "_download", fake_download)
    with pytest.raises(debian.PackageMismatch, match="asterisk-core-sounds-fr_1.6.1-1_all.deb"):
        debian.fetch(real.PACKAGES[1:], tmp_path)


def test_transcript_lines_words_and_fixes():
    text = "; comment\nagent-pass: Composez votre mot de passe.\ndir-welcome:\nbeeperr: (ahooga)\n"
    assert real.parse_transcripts(text) == {
        "agent-pass": "Composez votre mot de passe.",
        "beeperr": "(ahooga)",
    }
    assert real.words("... a joint la conférence.") == 4  # "..." is no word
    assert real.words("appuyez sur 1 pour quitter") == 5
    fixed, applied = real.apply_fixes({"agent-alreadyon": "Cet agent est présentemnet en ligne."})
    assert fixed["agent-alreadyon"] == "Cet agent est présentement en ligne." and applied == 1
    assert len({(k, w) for k, w, _ in real.FIXES}) == len(real.FIXES)  # each listed once


def test_the_eval_reads_the_folder_the_data_stage_writes():
    assert real_eval.FOLDER == real.FOLDER


# --- the eval: every variant and the base read the set whole; the gate ---------------------


def _restrict(folder: Path, allowed: list[int] | None) -> Path:
    """A tiny Whisper that can say only `allowed` tokens, never ending (every chunk gets the
    decoding limit's worth), or nothing at all (None: the end token first)."""
    gen = json.loads((folder / "generation_config.json").read_text())
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    keep = {gen["eos_token_id"]} if allowed is None else set(allowed)
    gen["suppress_tokens"] = sorted(set(vocab.values()) - keep)
    (folder / "generation_config.json").write_text(json.dumps(gen))
    return folder


@pytest.fixture(scope="module")
def models(params: Params, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """mute: says nothing (WER 1 exactly: every word deleted); babble: says "beau" to the
    decoding limit in every chunk (far more words than said: WER above 1)."""
    root = tmp_path_factory.mktemp("real_models")
    # a 4-s window: infer.speech.audio's search and overlap (2.5 s) must fit in one
    mute = _restrict(save_speech(root / "mute", params, window_s=4), None)
    babble = save_speech(root / "babble", params, window_s=4)
    vocab = json.loads((babble / "tokenizer.json").read_text())["model"]["vocab"]
    _restrict(babble, [vocab["Ġbeau"]])
    return {"mute": mute, "babble": babble}


def _cfg(params: Params, **real_keys):
    real_cfg = params.speech_eval.real.model_copy(update={"max_samples": 3, **real_keys})
    update = dict(decode_max_tokens=20, threads=1, worst_examples=2, batch_size=4)
    return params.speech_eval.model_copy(update={**update, "real": real_cfg})


def _variants(tmp_path: Path, tuned: Path, exported: Path) -> list[Path]:
    """The fine-tuned model (speech_fp32) and one exported variant (int8_like), as discovered."""
    shutil.copytree(tuned, tmp_path / "speech_fp32")
    shutil.copytree(exported, tmp_path / "export" / "int8_like")
    return variants.discover(tmp_path / "speech_fp32", tmp_path / "export")


def untrimmed(params):
    """params.infer without the loop trim: babble's "beau beau beau ..." is a decoding loop the
    trim keeps once, and its extra words are what make it read worse than mute."""
    audio = params.infer.speech.audio.model_copy(update={"max_repeats": 0})
    speech = params.infer.speech.model_copy(update={"audio": audio})
    return params.infer.model_copy(update={"speech": speech})


def test_a_variant_worse_than_the_base_is_marked_with_both_figures(
    real_set, models, params, tmp_path
):
    data, _, _ = real_set
    folders = _variants(tmp_path, models["mute"], models["babble"])
    base = shutil.copytree(models["mute"], tmp_path / "base_zero_shot")
    got = real_eval.evaluate_real(
        _cfg(params), untrimmed(params), data, folders, base, tmp_path / "samples", tmp_path / "w"
    )
    assert got["clips"] == 3 and got["base"] == "base_zero_shot"
    found = got["variants"]
    assert list(found) == ["speech_fp32", "int8_like", "base_zero_shot"]
    assert found["base_zero_shot"]["wer"] == found["speech_fp32"]["wer"] == 1.0
    assert found["speech_fp32"]["gate"] == "passed" and found["speech_fp32"]["wer_vs_base"] == 0
    assert found["int8_like"]["gate"] == "failed" and found["int8_like"]["wer"] > 1.0
    (failure,) = got["gate_failures"]
    assert failure.startswith("int8_like: real-voice WER ")
    assert f"{found['int8_like']['wer']:.4f} vs the untouched base's 1.0000" in failure
    # how sure: paired over the same clips (one speaker: each clip a group)
    assert found["speech_fp32"]["wer_vs_base_ci95"] == [0.0, 0.0]
    assert found["int8_like"]["wer_vs_base_ci95"][0] > 0 and "95 % interval" in failure
    assert found["int8_like"]["wer_ci95_over"] == "3 clips"
    for name in found:
        preds = read_jsonl(tmp_path / "samples" / name / "real" / "predictions.jsonl")
        assert len(preds) == 3 and all(p["audio"].startswith(str(data)) for p in preds)
        assert len(found[name]["worst"]) == 2


def test_the_gate_fails_the_stage_when_asked_and_passes_better_variants(
    real_set, models, params, tmp_path
):
    data, _, _ = real_set
    folders = _variants(tmp_path, models["mute"], models["babble"])
    strict = _cfg(params, fail_on_gate=True)
    base = shutil.copytree(models["mute"], tmp_path / "base_zero_shot")
    with pytest.raises(real_eval.RealVoiceGateFailed, match="int8_like: real-voice WER"):
        real_eval.evaluate_real(
            strict, untrimmed(params), data, folders, base, tmp_path / "s", tmp_path / "w"
        )
    # the control: against a base that reads worse, neither variant is past the gate
    worse = shutil.copytree(models["babble"], tmp_path / "worse_base")
    got = real_eval.evaluate_real(
        strict, untrimmed(params), data, folders[:1], worse, tmp_path / "s2", tmp_path / "w2"
    )
    assert got["gate_failures"] == [] and got["variants"]["speech_fp32"]["gate"] == "passed"
    assert got["variants"]["speech_fp32"]["wer_vs_base"] < 0


@pytest.mark.slow
def test_each_clip_is_read_as_transcribe_reads_a_file(real_set, models, params):
    """Batching clips together changes nothing: each text is `transcribe`'s for that clip
    (voice detection off, as in the eval), long clips cut and joined the same way."""
    data, _, _ = real_set
    by_prompt = {r["prompt"]: r for r in read_jsonl(data / real.FOLDER / "manifest.jsonl")}
    # 1.6 s; 27 s (7 chunks); 7.3 s
    rows = [by_prompt[k] for k in ("agent-loggedoff", "conf-adminmenu-162", "agent-newlocation")]
    v = variants.load(models["babble"], threads=1)
    infer = real_eval.eval_infer(_cfg(params), params.infer)
    alone = [transcribe(v, decode(data / r["audio"]), infer)[1] for r in rows]
    assert real_eval.read_clips(v, rows, data, infer) == alone
    assert len(alone[1].split()) > len(alone[0].split())  # the long clip: many chunks read


@pytest.mark.slow
def test_the_eval_stage_writes_the_real_voice_beside_the_splits(
    real_set, models, params, speech_dataset, tmp_path
):
    """tasks/eval.py with the speech face's extra: the splits as before, `real` beside them
    for every variant (no base configured: the gate says unchecked), samples beside test's."""
    data = shutil.copytree(speech_dataset, tmp_path / "data")
    shutil.copytree(real_set[0] / real.FOLDER, data / real.FOLDER)
    folders = _variants(tmp_path, models["mute"], models["babble"])
    paths = params.paths.track("speech").model_copy(
        update={
            "data": data,
            "model": folders[0],
            "export": tmp_path / "export",
            "eval": tmp_path / "eval",
        }
    )
    cfg = _cfg(params).model_copy(
        update={"splits": ["test"], "max_samples": 2, "zero_shot_base": None}
    )
    view = params.model_copy(update={"speech_eval": cfg})
    face = tracks.face("speech", "eval")
    extra = face.eval_extra(view, paths)
    metrics = eval_run(cfg, face, data, folders, paths.eval, tmp_path / "m.json", extra=extra)
    assert json.loads((tmp_path / "m.json").read_text()) == metrics
    assert set(metrics["variants"]["int8_like"]["splits"]) == {"test"}
    got = metrics["real"]
    assert got["base"] is None and got["gate_failures"] == [] and got["clips"] == 3
    assert {n: m["gate"] for n, m in got["variants"].items()} == {
        "speech_fp32": "unchecked",
        "int8_like": "unchecked",
    }
    for name in ("speech_fp32", "int8_like"):
        for split in ("test", "real"):
            assert (paths.eval / "samples" / name / split / "predictions.jsonl").is_file()


def test_the_eval_face_says_why_the_set_is_absent(params, tmp_path):
    face = tracks.face("speech", "eval")
    paths = params.paths.track("speech").model_copy(update={"data": tmp_path / "data"})
    stats = tmp_path / "speech_data.json"
    stats.write_text(json.dumps({"real": {"absent": "apt-get is not on PATH. To measure ..."}}))
    view = params.model_copy(
        update={"paths": params.paths.model_copy(update={"metrics": tmp_path})}
    )
    assert face.eval_extra(view, paths)(tmp_path / "work") == {
        "real": {"absent": "apt-get is not on PATH. To measure ..."}
    }


def test_the_report_shows_the_figures_the_gate_and_an_absent_set(tmp_path, params):
    from sonfolio.report.sources import Sources

    ev = {
        "reference": "speech_fp32",
        "variants": {"speech_fp32": {"splits": {}}},
        "real": {
            "clips": 212,
            "audio_s": 1024.0,
            "base": "base_zero_shot",
            "max_wer_increase": 0.0,
            "variants": {
                "speech_fp32": {"kind": "torch", "wer": 0.41, "cer": 0.2, "wer_vs_base": 0.09,
                                "wer_vs_base_ci95": [0.05, 0.13], "gate": "failed",
                                "worst": []},
                "base_zero_shot": {"kind": "torch", "wer": 0.32, "cer": 0.15, "worst": []},
            },
            "gate_failures": ["speech_fp32: real-voice WER 0.4100 vs the untouched base's 0.3200"],
        },
    }  # fmt: skip
    src = Sources(tmp_path, tmp_path, {"speech": tmp_path}, tmp_path)
    table, clips = real_items(REPORT, ev, src, tmp_path, params.report)
    assert isinstance(table, Table) and isinstance(clips, Table)
    row = ["speech_fp32", "torch", "0.41", "0.2", "0.09 (0.05 to 0.13)", "failed"]
    assert table.rows[0][:6] == row  # the difference with its interval where the eval gave one
    assert table.rows[1][0] == "base_zero_shot (untouched base)"
    assert "Past the gate: speech_fp32: real-voice WER 0.4100" in table.note
    ev["real"] = {"absent": "apt-get is not on PATH"}
    (item,) = real_items(REPORT, ev, src, tmp_path, params.report)
    assert isinstance(item, Missing) and "apt-get is not on PATH" in item.what
    assert real_items(REPORT, {"variants": {}}, src, tmp_path, params.report) == []


def test_the_gate_says_how_sure_its_difference_is(params):
    """A variant worse than the base on every clip gets an interval above 0; one that errs as
    often, on other clips, an interval around 0: the gate's figure with how far it could move."""
    base = [(1, 10), (0, 8), (2, 12), (1, 9), (0, 10), (1, 11), (2, 10), (0, 9)]
    worse = [(e + 2, w) for e, w in base]
    shuffled = [(e + (1 if k % 2 else -1) * (e > 0 or k % 2), w) for k, (e, w) in enumerate(base)]
    words = sum(w for _, w in base)
    per_variant = {
        name: {"wer": sum(e for e, _ in c) / words}
        for name, c in (("base", base), ("worse", worse), ("alike", shuffled))
    }
    counts = {"base": base, "worse": worse, "alike": shuffled}
    failures = real_eval.check_gate(per_variant, "base", params.speech_eval, counts)
    low, high = per_variant["worse"]["wer_vs_base_ci95"]
    assert 0 < low < 16 / words < high
    low, high = per_variant["alike"]["wer_vs_base_ci95"]
    assert low < 0 < high
    assert any(f.startswith("worse:") and "95 % interval over the clips +" in f for f in failures)


def test_a_split_of_several_voices_is_resampled_by_voice():
    """The test split's unheard voices: each voice's clips err together, so the interval is
    over the voices, and over the clips only where there is one voice."""
    from sonfolio.speech.eval.evaluate import wer_interval, word_counts

    rows = [{"speaker": v} for v in ("a", "a", "b", "b", "c", "c")]
    refs = ["un deux trois quatre"] * 6
    hyps = ["un deux trois quatre", "un deux trois", "un", "un deux", "un deux trois quatre"] * 1
    hyps.append("un deux trois quatre")
    counts = [word_counts(r, h) for r, h in zip(refs, hyps, strict=True)]
    got = wer_interval(rows, counts)
    assert got["wer_ci95_over"] == "3 voices"
    low, high = got["wer_ci95"]
    assert low < 6 / 24 < high
    alone = wer_interval([{"speaker": "a"}] * 6, counts)
    assert alone["wer_ci95_over"] == "6 clips"
