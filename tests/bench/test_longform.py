"""benchmarks/longform.py end to end on a random tiny Whisper (Whisper's own tokenizer, an 8-s
window): the recordings built from the test split and the real voice, each engine run in its
own process, and the JSON a user reads (wall time, RTF, peak RSS, WER / CER, ratios to each
faster-whisper engine, the CPU). The figures of a random model mean nothing; their presence and
their sources do."""

from __future__ import annotations

import json
import shutil
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import yaml
from whisper_tiny import needs_tokenizer, save

from sonfolio.speech.common.audio import SAMPLE_RATE, write_wav

ROOT = Path(__file__).resolve().parents[2]


def _clips(data: Path, folder: str, texts: list[str], seconds: float) -> list[dict]:
    rng = np.random.default_rng(len(folder))
    rows = []
    for i, text in enumerate(texts):
        rel = f"{folder}/{i:06d}.wav"
        noise = 0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))
        write_wav(data / rel, (noise * 32767).astype(np.int16))
        rows.append({"audio": rel, "text": text, "split": "test"})
    return rows


@needs_tokenizer
@pytest.mark.slow
def test_longform_measures_each_engine_on_each_recording(tmp_path, monkeypatch):
    from benchmarks import longform

    run = tmp_path / "run"
    run.mkdir()
    # a window's token limit within the tiny model's 64 positions (faster-whisper is given it too)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["infer"]["speech"]["max_tokens"] = 24
    (run / "params.yaml").write_text(yaml.safe_dump(raw))
    model = save(run / "models/speech_fp32", layers=1, window_s=8, language="fr",
                 task="transcribe")  # fmt: skip
    # `sonfolio transcribe` reads a PyTorch folder as well as an ONNX one: the exported
    # variant's place holds the FP32 folder, so no export runs here
    shutil.copytree(model, run / "models/speech_onnx/int8_ptq")
    data = run / "data/speech"
    test = _clips(data, "audio/test", ["un deux trois", "quatre cinq six", "sept huit"], 1.5)
    (data / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    real = _clips(data, "real/audio", ["bonjour", "au revoir"], 2.0)
    (data / "real/manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in real))
    out = tmp_path / "longform.json"
    argv = ["--root", str(run), "--minutes", "0.05", "--threads", "1", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["longform", *argv])
    longform.main()

    result = json.loads(out.read_text())
    # `sonfolio transcribe` read the run's params (its infer settings), not the checkout's
    assert result["conditions"]["params"] == str((run / "params.yaml").resolve())
    assert result["conditions"]["sonfolio_decode_workers"] == 2
    recs = result["recordings"]
    assert set(recs) == {"test", "real", "startup_5s"}
    with wave.open(str(run / "benchmarks/longform/test.wav")) as w:  # clips and pauses joined
        assert w.getnframes() / SAMPLE_RATE == pytest.approx(recs["test"]["seconds"], abs=0.1)
    assert recs["test"]["clips"] == 1 and recs["real"]["clips"] == 1  # 3 s hold one each
    for name, rec in recs.items():
        engines = rec["engines"]
        batched = set() if name == "startup_5s" else {"faster_whisper_batched"}
        assert set(engines) == {"sonfolio", "faster_whisper", *batched}, name
        for engine, row in engines.items():
            assert row["wall_s"] > 0 and row["peak_rss_mb"] > 50, (name, engine)
            rtf = row["wall_s"] / rec["seconds"]
            assert row["real_time_factor"] == pytest.approx(rtf, rel=1e-2)
            assert row["wer"] >= 0 and row["cer"] >= 0
        for peer in set(engines) - {"sonfolio"}:
            ours = engines["sonfolio"]
            want = ours["wall_s"] / engines[peer]["wall_s"]
            assert ours[f"wall_vs_{peer}"] == pytest.approx(want, rel=1e-2)
            assert f"rss_vs_{peer}" in engines["sonfolio"]
    assert (run / "benchmarks/longform/ct2_int8/model.bin").is_file()  # the same weights, CT2
    assert result["conditions"]["cpu"]["summary"]

    # ours alone, under another params file (e.g. one decode worker): no peer rows, no ratios
    one = run / "one_worker.yaml"
    raw["infer"]["speech"]["decode_workers"] = 1
    one.write_text(yaml.safe_dump(raw))
    argv = [*argv[:-2], "--out", str(tmp_path / "ours.json"), "--engines", "sonfolio"]
    monkeypatch.setattr(sys, "argv", ["longform", *argv, "--params", str(one)])
    longform.main()
    ours = json.loads((tmp_path / "ours.json").read_text())
    assert ours["conditions"]["sonfolio_decode_workers"] == 1
    for rec in ours["recordings"].values():
        assert list(rec["engines"]) == ["sonfolio"]
        assert not [k for k in rec["engines"]["sonfolio"] if k.startswith(("wall_vs", "rss_vs"))]

    # the child `sonfolio transcribe` reads that file itself: one whose audio limit refuses the
    # recordings makes ours fail, naming the limit
    strict = run / "strict.yaml"
    raw["infer"]["speech"]["decode_workers"] = 2
    raw["infer"]["speech"]["audio_limits"]["max_audio_s"] = 1
    strict.write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(sys, "argv", ["longform", *argv, "--params", str(strict)])
    with pytest.raises(SystemExit, match="max_audio_s"):
        longform.main()
