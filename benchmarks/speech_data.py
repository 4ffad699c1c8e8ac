"""Benchmark the data@speech stage: synthetic clips per second, end to end and per step.

    python -m benchmarks.speech_data [--utterances 800]

utterances_per_s: the stage's own `run()` (sentences -> espeak-ng -> 16 kHz -> noise -> WAV ->
manifest) on the configured synthetic settings, with 1 worker process and with one per core.
step_ms: where one clip's time goes, in one process (median over the clips).
Writes benchmarks/results/speech_data.json and prints a table.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from benchmarks import console, timed_data_run
from sonfolio import cpu
from sonfolio.config.data import SpeechData
from sonfolio.config.params import load_params
from sonfolio.io import write_json
from sonfolio.parallel import worker_count
from sonfolio.speech.common.audio import add_noise, from_pcm16, resample, to_pcm16, write_wav
from sonfolio.speech.common.normalize import spell_numbers
from sonfolio.speech.data.espeak import Synthesizer
from sonfolio.speech.data.synthetic import plan

RESULTS = Path("benchmarks/results/speech_data.json")
TARGET_PER_S = 100  # on 2 cores


def utterances_per_s(cfg: SpeechData, utterances: int, workers: int) -> dict[str, float]:
    syn = cfg.synthetic.model_copy(update={"utterances": utterances})
    stats, elapsed = timed_data_run(
        cfg.model_copy(update={"synthetic": syn, "workers": workers}), "speech"
    )
    clips = sum(stats["utterances"].values())
    return {
        "clips": clips,
        "audio_hours": round(sum(stats["hours"].values()), 3),
        "seconds": round(elapsed, 2),
        "utterances_per_s": round(clips / elapsed, 1),
    }


def step_ms(cfg: SpeechData, clips: int) -> dict[str, float]:
    """Median milliseconds per clip of each step, in this process."""
    jobs = plan(cfg.synthetic.model_copy(update={"utterances": clips}), cfg.seed)
    times: dict[str, list[float]] = {"synthesize": [], "resample": [], "noise": [], "write": []}
    with tempfile.TemporaryDirectory() as tmp, Synthesizer() as synth:
        for i, job in enumerate(jobs):
            t0 = time.perf_counter()
            pcm = synth.say(spell_numbers(job.text), job.variant, job.rate_wpm, job.pitch)
            t1 = time.perf_counter()
            x = resample(from_pcm16(pcm), synth.sample_rate)
            t2 = time.perf_counter()
            x = add_noise(x, 20.0, np.random.default_rng(i))
            t3 = time.perf_counter()
            write_wav(Path(tmp) / f"{i}.wav", to_pcm16(x))
            t4 = time.perf_counter()
            for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                times[name].append(dt * 1000)
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--utterances", type=int, default=800, help="clips per measurement")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = load_params().speech_data
    cores = worker_count(0)
    load_before = cpu.load_average()
    runs = {f"{w}_process": utterances_per_s(cfg, args.utterances, w) for w in sorted({1, cores})}
    syn = cfg.synthetic
    result: dict[str, Any] = {
        "utterances_per_s": {k: v["utterances_per_s"] for k, v in runs.items()},
        "runs": runs,
        "step_ms": step_ms(cfg, 200),
        "conditions": {
            "utterances": args.utterances,
            **cpu.run_conditions(load_before),
            "workers": cores,
            "python": platform.python_version(),
            "rate_wpm": list(syn.rate_wpm),
            "noise_fraction": syn.noise_fraction,
            "max_duration_s": cfg.max_duration_s,
        },
        "targets": {"utterances_per_s_2_cores": TARGET_PER_S},
    }
    write_json(RESULTS, result)
    table = Table(title="speech_data benchmark")
    for col in ("measure", "value", "target"):
        table.add_column(col)
    for k, v in result["utterances_per_s"].items():
        target = f">= {TARGET_PER_S}" if k == "2_process" else ""
        table.add_row(f"utterances/s, {k.replace('_', ' ')}", f"{v:.1f}", target)
    for k, v in result["step_ms"].items():
        table.add_row(f"{k}, ms per clip (1 process)", f"{v:.2f}", "")
    console().print(table)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
