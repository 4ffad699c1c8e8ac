"""The speech track's data stage: synthetic speech by default, a local corpus folder, bad input."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import datasets.config
import numpy as np
import pytest

from sonfolio import tracks
from sonfolio.config.data import SpeechData
from sonfolio.io import read_jsonl
from sonfolio.speech.common.audio import SAMPLE_RATE, read_wav
from sonfolio.speech.common.normalize import normalize
from sonfolio.speech.data.dataset import TooManySkipped
from sonfolio.speech.data.hub import DatasetUnavailable
from sonfolio.speech.data.synthetic import plan
from tasks.data import run

SPEECH = tracks.face("speech", "data")


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir()) if parent.exists() else []


def test_manifest_rows_point_at_16khz_clips_of_their_duration(speech_dataset: Path) -> None:
    rows = read_jsonl(speech_dataset / "manifest.jsonl")
    assert len(rows) >= 78  # 80 planned, at most a couple too long
    assert set(rows[0]) == {"audio", "text", "text_norm", "duration", "speaker", "split", "sha256"}
    for row in rows:
        # downstream stages depend on the manifest alone: it must change whenever a clip does
        digest = hashlib.sha256((speech_dataset / row["audio"]).read_bytes()).hexdigest()
        assert row["sha256"] == digest
        pcm, rate = read_wav(speech_dataset / row["audio"])
        assert rate == SAMPLE_RATE
        assert row["duration"] == pytest.approx(pcm.size / SAMPLE_RATE, abs=1e-3)
        assert 0.3 < row["duration"] <= 8.0
        assert row["text_norm"] == normalize(row["text"])
        assert np.sqrt(np.mean((pcm / 32768.0) ** 2)) > 0.02  # speech, not silence


def test_text_covers_what_makes_french_hard(speech_dataset: Path) -> None:
    texts = " ".join(r["text"] for r in read_jsonl(speech_dataset / "manifest.jsonl"))
    assert any(ch in texts for ch in "éèàçêô")
    assert "'" in texts  # elisions: l', d', qu'
    assert any(ch.isdigit() for ch in texts)  # numbers written with digits, said in words


def test_test_split_has_unheard_voices_and_unseen_sentences(speech_dataset: Path, params) -> None:
    rows = read_jsonl(speech_dataset / "manifest.jsonl")
    by_split = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test")}
    assert all(by_split.values())
    train_voices = {r["speaker"] for r in by_split["train"]}
    test_voices = {r["speaker"] for r in by_split["test"]}
    assert not train_voices & test_voices
    assert test_voices <= {f"fr+{v}" for v in params.speech_data.synthetic.test_voices}
    train_text = {r["text_norm"] for r in by_split["train"]}
    assert not train_text & {r["text_norm"] for r in by_split["test"]}
    assert not train_text & {r["text_norm"] for r in by_split["val"]}


def test_stats_report_hours_and_counts_per_split(speech_dataset: Path) -> None:
    stats = json.loads((speech_dataset.parent / "speech_data.json").read_text())
    rows = read_jsonl(speech_dataset / "manifest.jsonl")
    assert sum(stats["utterances"].values()) == len(rows)
    hours = sum(r["duration"] for r in rows) / 3600
    assert sum(stats["hours"].values()) == pytest.approx(hours, abs=1e-3)
    assert stats["source"] == "synthetic"


def test_output_does_not_depend_on_the_number_of_workers(
    tiny_speech: Callable[..., SpeechData], tmp_path: Path
) -> None:
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        cfg = tiny_speech(synthetic={"utterances": 24}, workers=workers)
        run(cfg, SPEECH, tmp_path / "downloads", out, tmp_path / f"m{workers}.json")
        wavs = sorted((out / "audio").rglob("*.wav"))
        outs.append([(out / "manifest.jsonl").read_bytes()] + [w.read_bytes() for w in wavs])
        # the stats eval@speech reads: the same bytes for the same data, the run's time apart
        outs[-1].append((tmp_path / f"m{workers}.json").read_bytes())
        assert json.loads((tmp_path / f"m{workers}_time.json").read_text())["seconds"] > 0
    assert outs[0] == outs[1]


@pytest.mark.slow
def test_the_default_dataset_builds_whole(params, tmp_path: Path) -> None:
    """Its speed is benchmarks/speech_data.py's (a timed test fails on a busy machine)."""
    stats = run(
        params.speech_data, SPEECH, tmp_path / "downloads", tmp_path / "speech", tmp_path / "m.json"
    )
    assert sum(stats["utterances"].values()) == params.speech_data.synthetic.utterances  # none lost
    assert stats["duration_s"]["min"] >= 0.3 and stats["duration_s"]["max"] <= 8.0  # no empty clip
    assert stats["speakers"]["test"] == len(params.speech_data.synthetic.test_voices)


def test_plan_is_the_same_for_a_seed_and_differs_across_seeds(params) -> None:
    cfg = params.speech_data.synthetic.model_copy(update={"utterances": 40})
    assert plan(cfg, 0) == plan(cfg, 0)
    assert [j.text for j in plan(cfg, 0)] != [j.text for j in plan(cfg, 1)]


def test_too_many_skipped_fails_lists_clips_and_leaves_nothing(
    tiny_speech: Callable[..., SpeechData], tmp_path: Path
) -> None:
    cfg = tiny_speech(synthetic={"utterances": 20}, max_duration_s=1.0)  # most clips longer
    with pytest.raises(TooManySkipped) as err:
        run(
            cfg,
            SPEECH,
            tmp_path / "downloads",
            tmp_path / "out" / "speech",
            tmp_path / "metrics.json",
        )
    message = str(err.value)
    assert "speech_data.max_skip_fraction" in message and "too_long" in message
    assert "audio/train/000000.wav" in message
    assert leftovers(tmp_path / "out") == []  # no output, no temporary folder
    assert not (tmp_path / "metrics.json").exists()


def test_a_failed_rebuild_keeps_the_previous_output(
    tiny_speech: Callable[..., SpeechData], tmp_path: Path
) -> None:
    out = tmp_path / "speech"
    run(
        tiny_speech(synthetic={"utterances": 20}),
        SPEECH,
        tmp_path / "downloads",
        out,
        tmp_path / "m.json",
    )
    before = (out / "manifest.jsonl").read_bytes()
    with pytest.raises(TooManySkipped):
        cfg = tiny_speech(synthetic={"utterances": 20}, max_duration_s=1.0)
        run(cfg, SPEECH, tmp_path / "downloads", out, tmp_path / "m.json")
    assert (out / "manifest.jsonl").read_bytes() == before
    # the first build's stats and time (a failed build writes neither)
    assert leftovers(tmp_path) == ["m.json", "m_time.json", "speech"]


def test_unknown_voice_variant_fails_before_any_work(
    tiny_speech: Callable[..., SpeechData], tmp_path: Path
) -> None:
    cfg = tiny_speech(synthetic={"test_voices": ["m7", "zz9"]})
    with pytest.raises(ValueError, match=r"speech_data\.synthetic\.test_voices.*'zz9'"):
        run(cfg, SPEECH, tmp_path / "downloads", tmp_path / "speech", tmp_path / "m.json")
    assert leftovers(tmp_path) == []


def hub_cfg(tiny_speech: Callable[..., SpeechData], name: str, **update) -> SpeechData:
    cfg = tiny_speech()
    hub = cfg.hub.model_copy(update={"name": name, **update})
    return cfg.model_copy(update={"source": "hub", "hub": hub, "max_skip_fraction": 0.5})


@pytest.mark.parametrize("streaming", [True, False])
def test_local_corpus_folder_loads_like_the_hub(
    streaming: bool,
    tiny_speech: Callable[..., SpeechData],
    local_corpus: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    bad = [("empty.flac", b"", "vide"), ("junk.flac", b"not audio at all", "mauvais")]
    folder = local_corpus(bad)
    cfg = hub_cfg(tiny_speech, str(folder), streaming=streaming)
    stats = run(cfg, SPEECH, tmp_path / "downloads", tmp_path / "speech", tmp_path / "m.json")
    assert stats["utterances"] == {"train": 4, "val": 2, "test": 2}
    assert stats["skipped"] == {"empty_audio": 1, "unreadable": 1}
    rows = read_jsonl(tmp_path / "speech" / "manifest.jsonl")
    assert rows[0]["text"] == "Le chat dort sur le canapé."
    assert rows[0]["speaker"] == "100"
    pcm, rate = read_wav(tmp_path / "speech" / rows[0]["audio"])  # 22,050 Hz FLAC in
    assert rate == SAMPLE_RATE and rows[0]["duration"] == pytest.approx(pcm.size / SAMPLE_RATE)


def test_local_corpus_max_samples_takes_the_first_rows(
    tiny_speech: Callable[..., SpeechData], local_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    cfg = hub_cfg(tiny_speech, str(local_corpus()), max_samples=1)
    stats = run(cfg, SPEECH, tmp_path / "downloads", tmp_path / "speech", tmp_path / "m.json")
    assert stats["utterances"] == {
        "train": 1,
        "val": 1,
        "test": 1,
    }


def test_bad_audio_past_the_cap_fails_and_lists_the_files(
    tiny_speech: Callable[..., SpeechData], local_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    bad = [("empty.flac", b"", "vide"), ("junk.flac", b"not audio at all", "mauvais")]
    cfg = hub_cfg(tiny_speech, str(local_corpus(bad))).model_copy(update={"max_skip_fraction": 0.1})
    with pytest.raises(TooManySkipped) as err:
        run(cfg, SPEECH, tmp_path / "downloads", tmp_path / "out" / "speech", tmp_path / "m.json")
    assert "train[4] empty.flac: empty_audio" in str(err.value)
    assert "train[5] junk.flac: unreadable" in str(err.value)
    assert leftovers(tmp_path / "out") == []


def test_unknown_dataset_says_what_to_configure(
    tiny_speech: Callable[..., SpeechData], tmp_path: Path
) -> None:
    cfg = hub_cfg(tiny_speech, "nobody/no-such-speech-dataset")
    with pytest.raises(DatasetUnavailable) as err:
        run(cfg, SPEECH, tmp_path / "downloads", tmp_path / "speech", tmp_path / "m.json")
    message = str(err.value)
    assert "speech_data.hub.name = 'nobody/no-such-speech-dataset'" in message
    assert "local folder" in message and "HF_HUB_OFFLINE" in message
    assert leftovers(tmp_path) == []


def test_missing_column_names_the_key(
    tiny_speech: Callable[..., SpeechData], local_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    cfg = hub_cfg(tiny_speech, str(local_corpus()), text_column="sentence")
    with pytest.raises(DatasetUnavailable, match=r"speech_data\.hub\.text_column = 'sentence'"):
        run(cfg, SPEECH, tmp_path / "downloads", tmp_path / "speech", tmp_path / "m.json")
