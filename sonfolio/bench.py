"""Measuring every variant of a track on the same inputs: size, peak RSS, latency, throughput
and the greedy outputs (scored by the stage).

Each variant runs in its own fresh process (`python -m sonfolio.bench SPEC OUT`) so that its
peak RSS is its own; `repeats` rounds run every variant once each, in an order rotated per
round (interleaved, so a load spike on the shared machine hits all variants alike), and the
figures are medians / percentiles over all rounds.

Latency is measured on a forced decode length (`decode_tokens`, end of text suppressed) so
every runtime does the same work: encoder ms (encoder alone), end-to-end ms (encoder + greedy
decode of that many tokens, batch 1), decoder ms per token = (end-to-end - encoder) / tokens.
Quality comes from a separate greedy decode that stops at end of text.

A model read by its CTC head (config `ctc_decoding`, sonfolio.train.ctc) has no decoder steps:
every runtime runs its encoder with the head and collapses the best labels, so end-to-end is
the encoder's time plus the head's, and "decoder ms per token" is what little that adds
spread over `decode_tokens`; `decoding` says which a variant used.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sonfolio import cpu
from sonfolio.ctc_format import folder_decoding
from sonfolio.infer.ortloop import OrtCtc, OrtGreedy, set_spinning
from sonfolio.io import write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Case:
    """One variant to measure: `runtime` torch | ort | ct2; `dtype` fp32 | bf16 (torch)."""

    name: str
    runtime: str
    folder: str
    dtype: str = "fp32"


@dataclass(frozen=True)
class Spec:
    """What a worker process measures; written as JSON for it."""

    case: Case
    track: str  # the track's name: its definition (sonfolio.tracks) says how a model loads
    inputs: str  # .npy file: (N, ...) float32 model inputs
    threads: int
    decoder_threads: int  # ort_loop only: intra-op threads of the decoder session
    spin_wait: bool  # idle intra-op threads spin (ORT allow_spinning, OpenMP's wait policy)
    warmup: int
    batch_size: int
    decode_tokens: int
    quality_tokens: int
    io_binding: bool
    prompt: list[int]  # CT2 only: the decoder prompt (see convert_ct2)
    eos_id: int
    quality: bool  # also decode greedily to end of text (round 0 only)


# ---------------------------------------------------------------------------- worker side


def _rss_mb() -> float:
    """Peak RSS of this process's address space, MiB.

    /proc's VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over across execve, so
    a worker started by a parent holding 400 MB of torch would report at least that.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: macOS, in bytes
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)


class _Torch:
    def __init__(self, spec: Spec) -> None:
        import torch

        from sonfolio import tracks
        from sonfolio.train import ctc

        torch.set_num_threads(spec.threads)
        cls = tracks.get(spec.track).torch_model_class()
        self.dtype = torch.bfloat16 if spec.case.dtype == "bf16" else torch.float32
        model = cls.from_pretrained(spec.case.folder, dtype=self.dtype)
        self.model = ctc.load_head(model, Path(spec.case.folder)).eval()
        self.torch = torch
        # sonfolio.train.ctc where the model is read by its CTC head, else None
        self.ctc = ctc if ctc.decodes_with_ctc(model.config) else None

    def tensor(self, x: np.ndarray) -> Any:
        return self.torch.from_numpy(x).to(self.dtype)

    def encode(self, x: np.ndarray) -> None:
        with self.torch.inference_mode():
            self.model.get_encoder()(self.tensor(x))

    def generate(self, x: np.ndarray, new: int, forced: bool) -> list[list[int]]:
        if self.ctc is not None:  # read by the CTC head: no decoder steps to force
            return self.ctc.greedy(self.model, self.tensor(x), new)
        kw = {"min_new_tokens": new} if forced else {}
        with self.torch.inference_mode():
            ids = self.model.generate(
                self.tensor(x), max_new_tokens=new, num_beams=1, do_sample=False, **kw
            )
        return ids.tolist()


class _Ort(_Torch):
    def __init__(self, spec: Spec) -> None:
        import onnxruntime
        import torch

        from sonfolio import tracks
        from sonfolio.export import validate_variant

        validate_variant(Path(spec.case.folder))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = spec.threads
        options.inter_op_num_threads = 1
        set_spinning(options, spec.spin_wait)
        self.definition = tracks.get(spec.track)
        self.model = self.definition.ort_model_class().from_pretrained(
            spec.case.folder, session_options=options, use_io_binding=spec.io_binding
        )
        self.torch, self.dtype = torch, torch.float32
        reads, blank = folder_decoding(Path(spec.case.folder))
        self.ctc = OrtCtc(self.model.encoder.session, blank) if reads else None

    def encode(self, x: np.ndarray) -> None:
        self.model.encoder(**self.definition.ort_encoder_inputs(self.tensor(x)))

    def generate(self, x: np.ndarray, new: int, forced: bool) -> list[list[int]]:
        if self.ctc is not None:  # the encoder session's ctc_logits output
            return self.ctc.generate(x, new)
        return super().generate(x, new, forced)


class _CT2:
    """CTranslate2's Whisper (faster-whisper's engine); prompt from convert_ct2."""

    def __init__(self, spec: Spec) -> None:
        import ctranslate2

        self.ct2 = ctranslate2
        self.model = ctranslate2.models.Whisper(
            spec.case.folder,
            device="cpu",
            compute_type="int8",
            intra_threads=spec.threads,
            inter_threads=1,
        )
        self.prompt = spec.prompt
        self.eos = spec.eos_id

    def encode(self, x: np.ndarray) -> None:
        self.model.encode(self.ct2.StorageView.from_array(np.ascontiguousarray(x)))

    def generate(self, x: np.ndarray, new: int, forced: bool) -> list[list[int]]:
        # CT2 decodes min(max_length // 2, max_length - prompt) new tokens at most.
        out = self.model.generate(
            self.ct2.StorageView.from_array(np.ascontiguousarray(x)),
            [self.prompt] * len(x),
            max_length=2 * new,
            beam_size=1,
            suppress_blank=False,
            suppress_tokens=[self.eos] if forced else [],
        )
        return [r.sequences_ids[0] for r in out]


class _OrtLoop(OrtGreedy):
    """OrtGreedy as a bench runtime, configured from a Spec."""

    def __init__(self, spec: Spec) -> None:
        super().__init__(
            Path(spec.case.folder),
            spec.threads,
            spec.decoder_threads,
            spec.spin_wait,
            spec.prompt[0],
            spec.eos_id,
        )


def _ort_loop(spec: Spec) -> Any:
    """Our loop: OrtCtc for a model read by its CTC head, else the greedy decoder loop."""
    reads, blank = folder_decoding(Path(spec.case.folder))
    if reads:
        return OrtCtc.open(Path(spec.case.folder), spec.threads, spec.spin_wait, blank)
    return _OrtLoop(spec)


RUNTIMES = {"torch": _Torch, "ort": _Ort, "ort_loop": _ort_loop, "ct2": _CT2}


def _ms(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - start) * 1e3


def measure(spec: Spec) -> dict[str, Any]:
    """Run one variant on the inputs; returns raw timings, RSS, token counts and outputs."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(spec.threads)
    inputs = np.load(spec.inputs)
    rss_imports = _rss_mb()
    runner = RUNTIMES[spec.case.runtime](spec)
    n, steps = len(inputs), spec.decode_tokens
    for i in range(spec.warmup):
        runner.generate(inputs[i % n : i % n + 1], steps, forced=True)
    enc, e2e, new_tokens = [], [], []
    for i in range(n):
        x = inputs[i : i + 1]
        enc.append(_ms(runner.encode, x))
        start = time.perf_counter()
        ids = runner.generate(x, steps, forced=True)
        e2e.append((time.perf_counter() - start) * 1e3)
        echoed = len(ids[0]) and ids[0][0] == spec.prompt[0]  # HF echoes the start token
        new_tokens.append(len(ids[0]) - int(echoed))
    start = time.perf_counter()
    for b in range(0, n, spec.batch_size):
        runner.generate(inputs[b : b + spec.batch_size], steps, forced=True)
    batch_s = time.perf_counter() - start
    outputs = []
    if spec.quality:
        for b in range(0, n, spec.batch_size):
            outputs += runner.generate(inputs[b : b + spec.batch_size], spec.quality_tokens, False)
    return {
        "encoder_ms": enc,
        "e2e_ms": e2e,
        "tokens_out": new_tokens,
        "batch_seconds": batch_s,
        "rss_peak_mb": _rss_mb(),
        "rss_imports_mb": rss_imports,
        "outputs": outputs,
    }


def main(argv: list[str]) -> None:
    raw = json.loads(Path(argv[0]).read_text())
    spec = Spec(**{**raw, "case": Case(**raw["case"])})
    Path(argv[1]).write_text(json.dumps(measure(spec)))


# ---------------------------------------------------------------------------- parent side


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
        [sys.executable, "-m", "sonfolio.bench", str(spec_path), str(out_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode:
        raise RuntimeError(
            f"bench of variant {spec.case.name} ({spec.case.folder}) failed:\n{proc.stderr[-3000:]}"
        )
    return json.loads(out_path.read_text())


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def summarize(runs: list[dict[str, Any]], decode_tokens: int, batch_size: int) -> dict[str, Any]:
    """Pool the rounds of one variant: p50/p95 latency, throughput, median RSS."""
    enc = [v for r in runs for v in r["encoder_ms"]]
    e2e = [v for r in runs for v in r["e2e_ms"]]
    per_token = [(t - e) / decode_tokens for t, e in zip(e2e, enc, strict=True)]
    n = len(runs[0]["e2e_ms"])
    return {
        "encoder_ms_p50": round(percentile(enc, 50), 2),
        "encoder_ms_p95": round(percentile(enc, 95), 2),
        "decoder_ms_per_token_p50": round(percentile(per_token, 50), 3),
        "decoder_ms_per_token_p95": round(percentile(per_token, 95), 3),
        "e2e_ms_p50": round(percentile(e2e, 50), 2),
        "e2e_ms_p95": round(percentile(e2e, 95), 2),
        "throughput_batch1_per_s": round(1e3 / percentile(e2e, 50), 2),
        f"throughput_batch{batch_size}_per_s": round(
            n / statistics.median(r["batch_seconds"] for r in runs), 2
        ),
        "rss_peak_mb": round(statistics.median(r["rss_peak_mb"] for r in runs), 1),
        "rss_over_imports_mb": round(
            statistics.median(r["rss_peak_mb"] - r["rss_imports_mb"] for r in runs), 1
        ),
        "new_tokens_median": statistics.median(t for r in runs for t in r["tokens_out"]),
    }


def bf16_support() -> tuple[bool, str]:
    """(available, reason): torch bf16 on this device."""
    import torch

    if torch.cuda.is_available():
        ok = torch.cuda.is_bf16_supported()
        return ok, f"CUDA device {'supports' if ok else 'lacks'} bf16"
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    native = [f for f in ("amx_bf16", "avx512_bf16") if f in flags.split()]
    if native:
        return True, f"CPU has {', '.join(native)}"
    return False, "this CPU has neither avx512_bf16 nor amx_bf16: bf16 matmuls would be emulated"


def convert_ct2(model_dir: Path, out: Path) -> list[int]:
    """The HF Whisper as CTranslate2 int8, with the special-token names CT2 looks up; returns
    the decoder prompt to give it.

    CTranslate2 finds Whisper's start, end and no-timestamps tokens by their OpenAI names
    (<|startoftranscript|>, <|endoftext|>, <|notimestamps|>); unless <|notimestamps|> ends the
    prompt it applies timestamp rules that forbid every text token at the first step. Our
    tokenizer names them <s> and </s> and has no no-timestamps token, so the converted
    vocabulary renames the start and end ids and names the last id (a rare BPE merge)
    <|notimestamps|>: the prompt is [start, last id], one token longer than HF's [start].
    Checked: with that same prompt, CT2 float32 and HF generate give identical tokens.
    """
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoTokenizer

    TransformersConverter(str(model_dir)).convert(str(out), quantization="int8", force=True)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    vocab_path = out / "vocabulary.json"
    vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    vocab[tok.bos_token_id] = "<|startoftranscript|>"
    vocab[tok.eos_token_id] = "<|endoftext|>"
    vocab[-1] = "<|notimestamps|>"
    vocab_path.write_text(json.dumps(vocab), encoding="utf-8")
    return [tok.bos_token_id, len(vocab) - 1]


PEERS = ("ct2_int8",)  # the engines a track's definition may ask for (its bench_peers)


def peer_case(name: str, model_dir: Path, workdir: Path) -> tuple[Case, list[int]]:
    """A peer engine measured beside the variants, made from the FP32 model under `workdir`,
    and the decoder prompt it needs (every runtime then gets that prompt, so outputs compare).

    `ct2_int8`: CTranslate2's Whisper in int8, faster-whisper's engine (convert_ct2).

    Raises:
        ValueError: `name` is not one of PEERS.
    """
    if name not in PEERS:
        raise ValueError(f"bench peer {name!r} (a track's bench_peers): known peers are {PEERS}")
    folder = workdir / "ct2"
    prompt = convert_ct2(model_dir, folder)
    return Case(name, "ct2", str(folder)), prompt


# ---------------------------------------------------------------------------- one stage


class QualityGateFailed(RuntimeError):
    """A variant lost more quality than the stage's gate allows (and fail_on_gate is set)."""


@dataclass(frozen=True)
class Track:
    """What a bench stage hands to `bench_track`."""

    name: str  # the track's name
    stage: str  # the stage's name, e.g. bench@score
    cases: list[Case]
    sizes: dict[str, int]  # bytes on disk per case name
    absent: dict[str, str]  # variant name -> why it was not measured
    inputs: np.ndarray  # (N, ...) float32
    quality_tokens: int
    prompt: list[int]  # CT2's decoder prompt; these ids are also dropped from outputs
    eos_id: int
    pad_id: int  # stripped from the end of outputs
    gate_metric: str  # the quality key the gate reads (lower is better)
    max_increase: float


def conditions(cfg: Any, workdir: Path) -> dict[str, Any]:
    """What the figures depend on, recorded beside them."""
    import platform

    import ctranslate2
    import onnxruntime
    import torch

    return {
        "threads": cfg.threads,
        "loop_decoder_threads": cfg.loop_decoder_threads,
        "spin_wait": cfg.spin_wait,
        "samples": cfg.samples,
        "warmup": cfg.warmup,
        "repeats": cfg.repeats,
        "batch_size": cfg.batch_size,
        "decode_tokens": cfg.decode_tokens,
        "io_binding": cfg.io_binding,
        "cpu_count": os.cpu_count(),
        "cpu": cpu.isa(),  # int8 speed and quality depend on VNNI / AMX / DOTPROD
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.processor() or platform.machine(),
        "versions": {
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "ctranslate2": ctranslate2.__version__,
        },
        "process": "a fresh process per variant per round; rounds interleaved",
    }


def bench_track(
    track: Track, cfg: Any, score: Any, workdir: Path
) -> tuple[dict[str, Any], list[str]]:
    """Measure every case; score its greedy outputs with `score(outputs) -> {metric: value}`
    (token id lists in, lower is better), and mark each against torch FP32 and the gate.

    Returns (metrics, failures); failures name the variants past the gate and the numbers.
    """
    from rich.progress import Progress

    np.save(workdir / "inputs.npy", track.inputs)
    runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in track.cases}
    metrics: dict[str, Any] = {"conditions": conditions(cfg, workdir)}
    with Progress(transient=True) as bar:
        job = bar.add_task(f"{track.stage}", total=cfg.repeats * len(track.cases))
        for r in range(cfg.repeats):
            k = r % len(track.cases)
            for case in track.cases[k:] + track.cases[:k]:
                spec = Spec(
                    case=case,
                    track=track.name,
                    inputs=str(workdir / "inputs.npy"),
                    threads=cfg.threads,
                    decoder_threads=cfg.loop_decoder_threads,
                    spin_wait=cfg.spin_wait,
                    warmup=cfg.warmup,
                    batch_size=cfg.batch_size,
                    decode_tokens=cfg.decode_tokens,
                    quality_tokens=track.quality_tokens,
                    io_binding=cfg.io_binding,
                    prompt=track.prompt,
                    eos_id=track.eos_id,
                    quality=r == 0,
                )
                runs[case.name].append(run_case(spec, workdir))
                bar.advance(job)
    metrics["conditions"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    variants = {}
    for case in track.cases:
        figures = summarize(runs[case.name], cfg.decode_tokens, cfg.batch_size)
        outputs = [_clean(ids, track) for ids in runs[case.name][0]["outputs"]]
        variants[case.name] = {
            "runtime": case.runtime,
            "decoding": "ctc" if folder_decoding(Path(case.folder))[0] else "attention",
            "bytes": track.sizes[case.name],
            **_int8_weights(case),
            **figures,
            **score(outputs),
            "_outputs": outputs,
        }
    failures = _compare(variants, track)
    for v in variants.values():
        v.pop("_outputs")
    variants.update({name: {"status": why} for name, why in track.absent.items()})
    metrics["variants"] = variants
    return metrics, failures


REFERENCE = "torch_fp32"


def _int8_weights(case: Case) -> dict[str, Any]:
    """{"int8_weights": ...} for an ORT case of an int8 folder (sonfolio.cpu), else {}."""
    if case.runtime == "torch" or not Path(case.folder).is_dir():
        return {}
    found = cpu.int8_weight_range(Path(case.folder))
    return {"int8_weights": found} if found else {}


def _clean(ids: list[int], track: Track) -> list[int]:
    """Token ids up to end of text, without the prompt or padding: runtimes differ in what
    they echo (HF Whisper drops the end token and pads a batch with the pad id)."""
    if track.eos_id in ids:
        ids = ids[: ids.index(track.eos_id)]
    while ids and ids[-1] == track.pad_id:
        ids = ids[:-1]
    while ids and ids[0] in track.prompt:
        ids = ids[1:]
    return ids


def _compare(variants: dict[str, dict[str, Any]], track: Track) -> list[str]:
    """Ratios to torch FP32, agreement of outputs with it, and the quality gate."""
    ref = variants[REFERENCE]
    peer = variants.get("ct2_int8")
    failures = []
    for name, v in variants.items():
        v["size_ratio"] = round(v["bytes"] / ref["bytes"], 4)
        v["speedup_vs_torch_fp32"] = round(ref["e2e_ms_p50"] / v["e2e_ms_p50"], 3)
        if peer is not None:
            v["latency_vs_ctranslate2"] = round(v["e2e_ms_p50"] / peer["e2e_ms_p50"], 3)
        same = [a == b for a, b in zip(v["_outputs"], ref["_outputs"], strict=True)]
        v["agreement_with_torch_fp32"] = round(sum(same) / len(same), 4)
        loss = v[track.gate_metric] - ref[track.gate_metric]
        v[f"{track.gate_metric}_increase"] = round(loss, 4)
        v["status"] = "passed"
        if name != REFERENCE and loss > track.max_increase:
            v["status"] = "failed"
            failures.append(
                f"{name}: {track.gate_metric} {v[track.gate_metric]:.4f} vs torch FP32 "
                f"{ref[track.gate_metric]:.4f} (+{loss:.4f} > the allowed +{track.max_increase})"
            )
    return failures


def finish(
    metrics: dict[str, Any], failures: list[str], cfg: Any, metrics_path: Path, stage: str
) -> dict[str, Any]:
    """Write the metrics; fail the stage if a gate failed and fail_on_gate is set."""
    metrics["gate_failures"] = failures
    if failures and cfg.fail_on_gate:
        raise QualityGateFailed(
            f"{stage}: quality gate failed (bench.fail_on_gate is true):\n  "
            + "\n  ".join(failures)
        )
    for f in failures:
        log.warning("%s: past the quality gate (marked failed): %s", stage, f)
    write_json(metrics_path, metrics)
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
