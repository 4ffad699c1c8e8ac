"""One variant measured in a fresh process: the worker's measurement loop, and its launcher.

Each variant runs in its own process (`python -m sonfolio.bench.worker SPEC OUT`, started by
`run_case`) so that its peak RSS is its own.

Latency is measured on a forced decode length (`decode_tokens`, end of text suppressed) so
every runtime does the same work: encoder ms (encoder alone), end-to-end ms (encoder + greedy
decode of that many tokens, batch 1), decoder ms per token = (end-to-end - encoder) / tokens.
Quality comes from a separate greedy decode that stops at end of text.

A runtime that `takes_audio` (faster-whisper) gets each clip's raw audio: its end-to-end time
includes its own feature extraction, which is also timed alone (`features_ms`, untimed input to
its encoder). For every other runtime, when the clips' audio is given, the feature extraction
that made its inputs is timed per clip after the rest (`features_ms`: the audio is read then,
after every RSS reading, as it is no input of theirs), so the stage can add it to end-to-end
and compare like for like.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from sonfolio.bench.case import Case, Spec
from sonfolio.bench.loop_runtime import loop_runtime
from sonfolio.bench.ort_runtime import OrtRuntime
from sonfolio.bench.peer import Ct2Runtime, FasterWhisperRuntime
from sonfolio.bench.torch_runtime import TorchRuntime
from sonfolio.cpu import peak_rss_mb

RUNTIMES = {
    "torch": TorchRuntime,
    "ort": OrtRuntime,
    "ort_loop": loop_runtime,
    "ct2": Ct2Runtime,
    "faster_whisper": FasterWhisperRuntime,
}


# the runtimes that load through transformers' Auto classes (torch's from_pretrained, optimum's
# ORT models): the track's own model classes are registered for them first; the ORT loop and the
# peers read their folders without transformers, which their measured memory must not hold
THROUGH_TRANSFORMERS = ("torch", "ort")


def open_runtime(spec: Spec) -> Any:
    """The spec's runtime on its folder, in this (fresh) process: for the runtimes that read the
    model type through transformers, the track's own model classes (score's conv encoder)
    registered first, as nothing else here has."""
    from sonfolio import tracks

    if spec.case.runtime in THROUGH_TRANSFORMERS:
        tracks.face(spec.track, "export").register_classes()
    return RUNTIMES[spec.case.runtime](spec)


def _ms(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - start) * 1e3


def measure(spec: Spec) -> dict[str, Any]:
    """Run one variant on the inputs; returns raw timings, RSS, token counts and outputs."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(spec.threads)
    rss_imports = peak_rss_mb()
    runner = open_runtime(spec)
    takes_audio = getattr(runner, "takes_audio", False)
    # each runtime holds its own inputs while it is measured: the clips' audio for one that
    # takes audio, their features for the rest (whose audio is read after, for the feature
    # timing alone: held through the run, it counted in their peak and not in a peer's)
    inputs: Any = _audio(spec.audio) if takes_audio else np.load(spec.inputs)
    n, steps = len(inputs), spec.decode_tokens
    for i in range(spec.warmup):
        runner.generate(inputs[i % n : i % n + 1], steps, forced=True)
    enc, e2e, new_tokens, features = [], [], [], []
    for i in range(n):
        x = inputs[i : i + 1]
        if takes_audio:  # its own features, timed alone; its encoder then takes them
            start = time.perf_counter()
            feats = runner.features(x)
            features.append((time.perf_counter() - start) * 1e3)
            enc.append(_ms(runner.encode, feats))
        else:
            enc.append(_ms(runner.encode, x))
        start = time.perf_counter()
        ids = runner.generate(x, steps, forced=True)
        e2e.append((time.perf_counter() - start) * 1e3)
        new_tokens.append(len(ids[0]) - _echoed(ids[0], spec.prompt))
    rss_batch1 = peak_rss_mb()  # one clip at a time so far, as faster-whisper always runs
    start = time.perf_counter()
    for b in range(0, n, spec.batch_size):
        runner.generate(inputs[b : b + spec.batch_size], steps, forced=True)
    batch_s = time.perf_counter() - start
    outputs = []
    if spec.quality:
        for b in range(0, n, spec.batch_size):
            outputs += runner.generate(inputs[b : b + spec.batch_size], spec.quality_tokens, False)
    result = {
        "encoder_ms": enc,
        "e2e_ms": e2e,
        "tokens_out": new_tokens,
        "batch_seconds": batch_s,
        "rss_peak_mb": peak_rss_mb(),
        "rss_batch1_mb": rss_batch1,
        "rss_imports_mb": rss_imports,
        "outputs": outputs,
        "input": "audio" if takes_audio else "features",
        "notes": getattr(runner, "notes", {}),  # what a runtime changed to run, if anything
    }
    if takes_audio:
        result["features_ms"] = features
    elif spec.audio:
        result["features_ms"] = _features_ms(spec, _audio(spec.audio))
    return result


def _echoed(ids: list[int], prompt: list[int]) -> int:
    """How many of the prompt's tokens `ids` starts with (HF echoes its prompt, CT2 does not)."""
    k = 0
    while k < min(len(ids), len(prompt)) and ids[k] == prompt[k]:
        k += 1
    return k


def _audio(path: str) -> list[np.ndarray] | None:
    """The clips of an .npz written by sonfolio.bench.run ("0", "1", ...), or None."""
    if not path:
        return None
    with np.load(path) as clips:
        return [clips[str(i)] for i in range(len(clips.files))]


def _features_ms(spec: Spec, audio: list[np.ndarray]) -> list[float]:
    """Per clip, ms of the feature extraction that made this runtime's inputs (the track's
    numpy preprocessing of `features_from`, as the inference path runs it: one clip at a
    time, as the runtimes take them)."""
    from sonfolio import tracks

    extractor = tracks.face(spec.track, "export").processor(Path(spec.features_from))
    rate = extractor.sampling_rate
    extractor(audio[0], sampling_rate=rate, return_tensors="np")  # warm: first-call costs
    return [_ms(lambda a: extractor(a, sampling_rate=rate, return_tensors="np"), a) for a in audio]


def main(argv: list[str]) -> None:
    """The worker process: `argv` = [spec JSON file, file the measurements are written to]."""
    raw = json.loads(Path(argv[0]).read_text())
    spec = Spec(**{**raw, "case": Case(**raw["case"])})
    Path(argv[1]).write_text(json.dumps(measure(spec)))


def run_case(spec: Spec, workdir: Path) -> dict[str, Any]:
    """Measure `spec` in a fresh process.

    Raises:
        RuntimeError: the worker failed; its stderr tail is in the message.
    """
    tag = f"{spec.case.name}-{time.monotonic_ns()}"
    spec_path, out_path = workdir / f"{tag}.json", workdir / f"{tag}.out.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    env = {**os.environ, "OMP_NUM_THREADS": str(spec.threads), "TOKENIZERS_PARALLELISM": "false"}
    if not spec.spin_wait:  # torch and CTranslate2 use OpenMP: the same choice as ORT's
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    proc = subprocess.run(
        [sys.executable, "-m", "sonfolio.bench.worker", str(spec_path), str(out_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode:
        raise RuntimeError(
            f"bench of variant {spec.case.name} ({spec.case.folder}) failed:\n{proc.stderr[-3000:]}"
        )
    return json.loads(out_path.read_text())


if __name__ == "__main__":
    main(sys.argv[1:])
