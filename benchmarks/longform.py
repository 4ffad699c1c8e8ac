"""Long recordings: `sonfolio transcribe` against faster-whisper on the same weights, and the
start-up of a cold `sonfolio transcribe` on a 5-second clip.

Run:    python -m benchmarks.longform [--root RUN] [--minutes 10] [--threads 2] [--batch-size 8]
        [--max-tokens N] [--params PARAMS] [--engines sonfolio ...]
Reads:  RUN/params.yaml, or PARAMS (paths; infer, as `sonfolio transcribe --params` reads it:
        its batch size and decode workers), the speech data stage's test split and real voice
        (<data>/real/, when the data stage built it), the exported `infer.variant` and the FP32
        model (converted to CTranslate2 int8 for faster-whisper: the same weights).
Writes: benchmarks/results/longform.json and prints a table: per recording and engine, the wall
        time of the whole process (start-up, model load, decoding: what a user waits for), the
        real-time factor (wall / audio), peak RSS (the process's own VmHWM) and WER / CER of the
        whole text against the joined transcripts (both normalized as eval@speech does).

Recordings, built once into RUN/benchmarks/longform/ (never trained on):
- `test`: the speech test split's clips in order, joined with 0.7 s of silence, to --minutes;
- `real`: the real voice's clips (one human speaker), joined the same way, to --minutes.
Engines, each in its own fresh process:
- `sonfolio`: the CLI, `sonfolio transcribe REC.wav --format json` (its chunks, no-speech check
  and batches as params.yaml sets them);
- `faster_whisper`: WhisperModel(...).transcribe, sequential, greedy (beam 1), French, no
  timestamps, no conditioning on the previous window (what ours does: each window alone);
- `faster_whisper_batched`: BatchedInferencePipeline(...).transcribe, --batch-size windows a
  call (its own VAD cuts the audio, as its users run it), greedy, French.
Both faster-whisper engines read the FP32 model converted to CTranslate2 int8 (sonfolio.bench.peer,
the bench stage's conversion), so all three run the same fine-tuned weights in int8.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from benchmarks import console, publish
from sonfolio import cpu
from sonfolio.config.commands import InferParams
from sonfolio.config.sections import read_sections
from sonfolio.io import read_jsonl

RESULTS = Path("benchmarks/results/longform.json")
REPO = Path(__file__).resolve().parents[1]  # where `python -m benchmarks.longform` imports
SAMPLE_RATE = 16_000
PAUSE_S = 0.7
ENGINES = ("sonfolio", "faster_whisper", "faster_whisper_batched")


# ------------------------------------------------------------------- the child processes


def child(engine: str, audio: Path, model: Path, out: Path, args: argparse.Namespace) -> None:
    """One engine on one recording, in this (fresh) process; writes its text and peak RSS."""
    threads, params = args.threads, args.params
    if engine == "sonfolio":
        from sonfolio.cli import main as cli

        text_file = out.with_suffix(".sonfolio.json")
        args = ["transcribe", str(audio), "--format", "json", "-o", str(text_file)]
        args += ["--model", str(model), "--threads", str(threads), "--params", str(params)]
        code = cli(args)
        if code:
            raise SystemExit(f"sonfolio transcribe exited {code}")
        text = json.loads(text_file.read_text(encoding="utf-8"))["files"][0]["text"]
    elif engine == "convert":
        from sonfolio.bench.peer import convert_ct2

        convert_ct2(model, audio)  # `audio` is the output folder here
        text = ""
    else:
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        from sonfolio.bench.peer import CT2_LOAD, _pad_to_window

        whisper = WhisperModel(str(model), cpu_threads=threads, **CT2_LOAD)
        _pad_to_window(whisper.feature_extractor.nb_max_frames)  # our model's 8-s window
        # the token limit a window that sonfolio transcribe has (infer.speech.max_tokens)
        common = {"language": "fr", "task": "transcribe", "beam_size": 1,
                  "max_new_tokens": args.max_tokens}  # fmt: skip
        if engine == "faster_whisper":
            segments, _ = whisper.transcribe(
                str(audio), **common, without_timestamps=True, condition_on_previous_text=False
            )
        else:
            pipeline = BatchedInferencePipeline(model=whisper)
            segments, _ = pipeline.transcribe(str(audio), **common, batch_size=args.batch_size)
        text = " ".join(s.text.strip() for s in segments)
    out.write_text(json.dumps({"text": text, "peak_rss_mb": cpu.peak_rss_mb()}), encoding="utf-8")


def run_child(engine: str, audio: Path, model: Path, work: Path, args: argparse.Namespace) -> dict:
    """`child` in a fresh interpreter: its output and the wall time from start to exit."""
    out = work / f"{engine}-{audio.stem}.json"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.longform",
        "--child",
        engine,
        str(audio),
        str(model),
        str(out),
        "--threads",
        str(args.threads),
        "--batch-size",
        str(args.batch_size),
        "--max-tokens",
        str(args.max_tokens),
        "--params",
        str(args.params),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{engine} on {audio.name} failed:\n{done.stderr[-3000:]}")
    return {**json.loads(out.read_text(encoding="utf-8")), "wall_s": round(wall, 2)}


# ------------------------------------------------------------------------ the recordings


def build_recording(rows: list[dict], data: Path, seconds: float, dest: Path) -> dict[str, Any]:
    """Clips of `rows`, in order, joined with PAUSE_S of silence, as many as `seconds` hold;
    writes `dest` (16-bit WAV) and returns the joined reference and the clips used."""
    from sonfolio.speech.common.audio import decode, to_pcm16, write_wav

    pause = np.zeros(int(PAUSE_S * SAMPLE_RATE), np.float32)
    parts, texts, total = [], [], 0.0
    for row in rows:
        clip = decode(data / row["audio"])
        if parts and total + (clip.size + pause.size) / SAMPLE_RATE > seconds:
            # at most `seconds`: a recording over infer.speech.audio_limits.max_audio_s is refused
            break
        parts += [clip, pause]
        texts.append(row["text"])
        total += (clip.size + pause.size) / SAMPLE_RATE
    write_wav(dest, to_pcm16(np.concatenate(parts)))
    return {
        "file": str(dest),
        "seconds": round(total, 1),
        "clips": len(texts),
        "text": " ".join(texts),
    }


def recordings(data: Path, minutes: float, work: Path) -> dict[str, dict[str, Any]]:
    found = {}
    test = [r for r in read_jsonl(data / "manifest.jsonl") if r["split"] == "test"]
    found["test"] = build_recording(test, data, minutes * 60, work / "test.wav")
    real = data / "real" / "manifest.jsonl"
    if real.is_file():
        found["real"] = build_recording(read_jsonl(real), data, minutes * 60, work / "real.wav")
    short = build_recording(test, data, 5.0, work / "clip5s.wav")
    found["startup_5s"] = short
    return found


# ---------------------------------------------------------------------------------- main


def rates(ref: str, hyp: str) -> dict[str, float]:
    from sonfolio.evaluation import char_error_rate, word_error_rate
    from sonfolio.speech.common.normalize import normalize

    refs, hyps = [normalize(ref)], [normalize(hyp)]
    return {
        "wer": round(word_error_rate(refs, hyps), 4),
        "cer": round(char_error_rate(refs, hyps), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the pipeline run")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--max-tokens", type=int, help="a window's; default: infer.speech.max_tokens"
    )
    parser.add_argument(
        "--params", type=Path, help="what `sonfolio transcribe` reads; default: RUN/params.yaml"
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=ENGINES,
        default=list(ENGINES),
        help="a subset (e.g. sonfolio alone, to compare two params files)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--child", nargs=4, metavar=("ENGINE", "AUDIO", "MODEL", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        engine, audio, model, out = args.child
        child(engine, Path(audio), Path(model), Path(out), args)
        return
    args.params = (args.params or args.root / "params.yaml").resolve()
    params = read_sections(InferParams, args.params)  # paths and infer, as transcribe reads
    paths, variant = params.paths.track("speech"), params.infer.variant
    args.max_tokens = args.max_tokens or params.infer.speech.max_tokens
    ours, fp32, data = (
        args.root / paths.export / variant,
        args.root / paths.model,
        args.root / paths.data,
    )
    if not (ours / "config.json").is_file() or not (fp32 / "config.json").is_file():
        sys.exit(
            f"benchmarks.longform: needs {ours} and {fp32}: run the pipeline first "
            "(dvc repro export@speech)"
        )
    work = args.root / "benchmarks" / "longform"
    work.mkdir(parents=True, exist_ok=True)
    load_before = cpu.load_average()
    recs = recordings(data, args.minutes, work)
    ct2 = work / "ct2_int8"
    if not (ct2 / "model.bin").is_file():
        run_child("convert", ct2, fp32, work, args)
    models = {"sonfolio": ours, "faster_whisper": ct2, "faster_whisper_batched": ct2}
    result: dict[str, Any] = {"recordings": {}}
    for name, rec in recs.items():
        engines = ("sonfolio", "faster_whisper") if name == "startup_5s" else ENGINES
        engines = tuple(e for e in engines if e in args.engines)
        rows = {}
        for engine in engines:
            got = run_child(engine, Path(rec["file"]), models[engine], work, args)
            rows[engine] = {
                **rates(rec["text"], got["text"]),
                "wall_s": got["wall_s"],
                "real_time_factor": round(got["wall_s"] / rec["seconds"], 4),
                "peak_rss_mb": round(got["peak_rss_mb"]),
                "text_head": got["text"][:160],
            }
        for peer in (e for e in engines if e != "sonfolio" and "sonfolio" in rows):
            rows["sonfolio"][f"wall_vs_{peer}"] = round(
                rows["sonfolio"]["wall_s"] / rows[peer]["wall_s"], 3
            )
            rows["sonfolio"][f"rss_vs_{peer}"] = round(
                rows["sonfolio"]["peak_rss_mb"] / rows[peer]["peak_rss_mb"], 3
            )
        meta = {k: rec[k] for k in ("seconds", "clips")}
        result["recordings"][name] = {**meta, "engines": rows}
    result["conditions"] = {
        "model": str(ours),
        "same_weights_ct2": str(ct2),
        "threads": args.threads,
        "batched_batch_size": args.batch_size,
        "max_tokens_a_window": args.max_tokens,
        "params": str(args.params),
        "sonfolio_batch_size": params.infer.batch_size,
        "sonfolio_decode_workers": params.infer.speech.decode_workers,
        **cpu.run_conditions(load_before),
    }
    publish(args.out, result, print_table)


def print_table(result: dict[str, Any]) -> None:
    table = Table(
        title="long recordings: whole-process wall time, memory and WER (same weights, int8)"
    )
    for col in (
        "recording",
        "engine",
        "wall s",
        "RTF",
        "peak RSS MB",
        "WER",
        "CER",
        "wall vs peer",
    ):
        table.add_column(col)
    for name, rec in result["recordings"].items():
        for engine, row in rec["engines"].items():
            vs = ", ".join(f"{k[8:]} {v:.2f}x" for k, v in row.items() if k.startswith("wall_vs_"))
            table.add_row(
                f"{name} ({rec['seconds']:.0f} s)",
                engine,
                f"{row['wall_s']:.1f}",
                f"{row['real_time_factor']:.3f}",
                str(row["peak_rss_mb"]),
                f"{row['wer']:.3f}",
                f"{row['cer']:.3f}",
                vs,
            )
    console().print(table)
    print(f"CPU: {result['conditions']['cpu']['summary']}")


if __name__ == "__main__":
    main()
