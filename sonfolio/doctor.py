"""`sonfolio doctor`: what this machine is, how fast it multiplies matrices, and what the
training engine would choose for each track, before anything trains.

The choices come from the engine's own functions (sonfolio.train.device / speed / batch), so
doctor cannot drift from what a run does. Models are built on the `meta` device (shapes only,
no memory, no time) to read their attention kernel and size. Fast: about 1-2 s on a CPU,
plus the torch.compile check when a preset enables compile.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from sonfolio import cpu, int8_weights, tracks
from sonfolio.train import speed
from sonfolio.train.batch import fixed_micro_batch
from sonfolio.train.device import (
    Backend,
    DeviceCannotDo,
    bf16_supported,
    choose_precision,
    detect_backend,
    set_matmul_precision,
)
from sonfolio.train.setup import Training

if TYPE_CHECKING:
    from sonfolio.config.params import Params
    from sonfolio.config.train import EngineOptions, TrainLoop

log = logging.getLogger(__name__)

PACKAGES = ("torch", "transformers", "accelerate", "onnxruntime", "optimum", "torchao")
OPTIONAL = ("bitsandbytes", "nvidia-ml-py")  # the `gpu` extra
PRECISION_NAMES = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}  # Accelerate's name -> ours
CPU_MATMUL_N = 1024  # 2.1 GFLOP per product: tens of ms on a laptop core, so ~1 s is many
GPU_MATMUL_N = 8192  # 1.1 TFLOP per product: a few ms on an H100, enough to fill it
MATMUL_SECONDS = 1.0  # the timed matmul's duration: long enough to be steady, short to wait


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES + OPTIONAL:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["cuda"] = torch.version.cuda or "none"
    out["hip"] = torch.version.hip or "none"
    return out


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def host() -> dict[str, Any]:
    """CPU cores (all, and those this process may use), torch threads, RAM in GiB."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    page = os.sysconf("SC_PAGE_SIZE")
    return {
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": usable,
        "torch_threads": torch.get_num_threads(),
        "ram_gib": round(page * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "ram_available_gib": round(page * os.sysconf("SC_AVPHYS_PAGES") / 2**30, 1),
    }


def gpu(backend: Backend) -> dict[str, Any] | None:
    if not backend.is_gpu:
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": backend.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "compute_capability": f"{props.major}.{props.minor}" if backend.kind == "cuda" else None,
        "gfx": getattr(props, "gcnArchName", None) if backend.kind == "rocm" else None,
        "multiprocessors": props.multi_processor_count,
        "devices": torch.cuda.device_count(),
    }


def matmul_tflops(
    dtype: torch.dtype, device: torch.device, n: int, seconds: float
) -> tuple[float, int]:
    """Dense (n x n) @ (n x n) products repeated for about `seconds`: (TFLOP/s, products).

    Written here (no library times one op this simply); torch.utils.benchmark adds
    statistics we do not need for a one-line health check.
    """
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    a @ b  # warm-up: kernel selection, thread pool start
    sync()
    done, start = 0, time.perf_counter()
    while True:
        a @ b
        done += 1
        if device.type == "cuda" and done % 10:
            continue  # check the clock every 10 products only: the sync would dominate
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2 * n**3 * done / elapsed / 1e12, done


def matmul_speeds(backend: Backend, seconds: float) -> dict[str, float]:
    """TFLOP/s per dtype: fp32 on CPU; bf16 (where supported), fp16 and tf32 on a GPU."""
    if not backend.is_gpu:
        return {
            "fp32": round(
                matmul_tflops(torch.float32, torch.device("cpu"), CPU_MATMUL_N, seconds)[0], 3
            )
        }
    dev = torch.device("cuda")
    dtypes = {"fp16": torch.float16, "tf32": torch.float32}  # tf32: set_matmul_precision ran
    if bf16_supported(backend):
        dtypes = {"bf16": torch.bfloat16, **dtypes}
    share = seconds / len(dtypes)
    return {k: round(matmul_tflops(d, dev, GPU_MATMUL_N, share)[0], 1) for k, d in dtypes.items()}


def _model_facts(track: str, training: Training, params: Params) -> dict[str, Any]:
    """The track's configured model: its source, size and attention kernels, read off the
    model built on the meta device (shapes only) as its stage builds it."""
    hub = training.hub_model
    if hub:  # building it would download it: say what decides instead
        return {"model": hub, "attention": f"as {hub} configures it (sdpa by default)"}
    folder = params.paths.track(track).tokenizer
    if not (folder / "tokenizer.json").is_file():
        why = f"no tokenizer in {folder}: run `dvc repro tokenizer@{track}`"
        return {"model": f"{training.model_size} preset", "attention": f"unknown: {why}"}
    with torch.device("meta"):
        model = training.build_model(folder)
    return {
        "model": f"{training.model_size} preset, {model.num_parameters() / 1e6:.2f} M parameters",
        "parameters": model.num_parameters(),
        "attention": training.attention_kernels(model),
    }


def _micro_batch(
    stage: str, loop: TrainLoop, opts: EngineOptions, backend: Backend, precision: str, cache: Path
) -> str:
    per_process = loop.effective_batch // int(os.environ.get("WORLD_SIZE", "1"))
    if backend.is_gpu and opts.micro_batch == "auto":
        # the engine searches with real steps of the real model at the start of training;
        # doctor only reports what earlier runs on this device found
        found = {}
        if cache.is_file():
            found = {k: v for k, v in json.loads(cache.read_text()).items() if f"|{stage}|" in k}
        known = f"; cached: {sorted(set(found.values()))}" if found else ""
        return f"auto: the largest divisor of {per_process} that runs a real step{known}"
    # the engine's own rule; with these settings it needs neither the model nor the Accelerator
    fixed = fixed_micro_batch(opts, per_process, backend)
    assert fixed is not None  # only auto on a GPU searches, and that returned above
    micro, why = fixed
    return f"{micro} x {per_process // micro} accumulation ({why})"


def _compile(opts: EngineOptions, probe: nn.Module) -> str:
    def step(model: nn.Module) -> None:
        model(torch.randn(4, 16, device=next(probe.parameters()).device)).sum().backward()

    _, why = speed.compile_model(probe, opts.compile, step)
    return why + (
        " (checked on a small module; the model is checked at its first step)"
        if opts.compile
        else ""
    )


def track_choices(track: str, params: Params, backend: Backend, cache: Path) -> dict[str, Any]:
    """What the engine would choose for this track: each choice with its reason."""
    stage = f"{track}_train"  # its params section, and its name in the micro-batch cache
    training = tracks.face(track, "train").training(params)
    loop = training.cfg
    opts = params.engine_options(loop.preset)
    out: dict[str, Any] = {"stage": stage, "preset": loop.preset}
    try:
        precision, why = choose_precision(opts.precision, backend)
    except DeviceCannotDo as err:  # the stage would fail before training; doctor says why
        out["precision"] = {"value": "impossible", "reason": str(err)}
        precision = "no"
    else:
        out["precision"] = {"value": PRECISION_NAMES[precision], "reason": why}
    out.update(_model_facts(track, training, params))
    try:
        training.check_size(backend)
    except DeviceCannotDo as err:
        out["model"] = f"impossible here: {err}"
    dev = torch.device("cuda") if backend.is_gpu else torch.device("cpu")
    probe = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16)).to(dev)
    out["compile"] = _compile(opts, probe)
    out["micro_batch"] = _micro_batch(stage, loop, opts, backend, precision, cache)
    out["optimizer"] = speed.optimizer(probe, opts.optimizer, loop.lr, 0.0, backend)[1]
    out["fp8"] = speed.fp8(probe, opts.fp8, backend)
    out["gradient_checkpointing"] = "on" if opts.gradient_checkpointing else "off"
    loader = speed.loader_workers(opts.loader_workers, backend, None, opts.preload_max_gib)
    out["loader"] = loader[2]
    return out


def int8_models(params: Params, tracks: list[str], extra: list[Path]) -> list[dict[str, Any]]:
    """Each int8 ONNX folder of the tracks' exports (and `extra`, folders a user names): its
    weight range and, where it loses accuracy on this CPU, the warning (also logged)."""
    folders = list(extra)
    for track in tracks:
        export = params.paths.track(track).export
        if export.is_dir():
            folders += sorted(p for p in export.iterdir() if p.name.startswith("int8_"))
    found = []
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(f"--model {folder}: no such folder")
        warning = int8_weights.int8_warning(folder, cpu.isa())
        if warning:
            log.warning(warning)
        found.append(
            {
                "folder": str(folder),
                "weights": int8_weights.int8_weight_range(folder),
                "warning": warning,
            }
        )
    return found


def diagnose(
    params: Params, tracks: list[str], matmul_seconds: float, models: list[Path] = ()
) -> dict[str, Any]:
    """Everything `sonfolio doctor` reports, as plain data (the --json output)."""
    backend = detect_backend()
    matmul = set_matmul_precision(backend)
    cache = params.paths.checkpoints / "micro_batch.json"
    return {
        "backend": backend.kind,
        "device": backend.name,
        "versions": versions(),
        "host": host(),
        "cpu_isa": cpu.isa(),
        "int8_models": int8_models(params, tracks, list(models)),
        "gpu": gpu(backend),
        "bf16_supported": bf16_supported(backend),
        "matmul_precision": matmul,
        "matmul_tflops": matmul_speeds(backend, matmul_seconds),
        "tracks": {t: track_choices(t, params, backend, cache) for t in tracks},
    }


def render(report: dict[str, Any], console: Any) -> None:
    """The report as rich tables."""
    from rich.table import Table

    machine = Table(title="sonfolio doctor: this machine", show_header=False)
    machine.add_column(style="bold")
    machine.add_column()
    machine.add_row("backend", report["backend"])
    machine.add_row("device", report["device"])
    h = report["host"]
    machine.add_row(
        "cpu",
        f"{h['cpu']}: {h['cpu_cores']} cores ({h['cpu_cores_usable']} usable), "
        f"torch threads {h['torch_threads']}",
    )
    isa = report["cpu_isa"]
    sat = {True: "saturates unless weights are 7-bit", False: "no saturation", None: "unknown"}
    machine.add_row(
        "int8 / int4", f"{isa['summary']}; ORT u8 x s8 int8 MatMul: {sat[isa['int8_saturates']]}"
    )
    machine.add_row("ram", f"{h['ram_gib']} GiB ({h['ram_available_gib']} GiB available)")
    if report["gpu"]:
        g = report["gpu"]
        arch = g["compute_capability"] or g["gfx"]
        machine.add_row(
            "gpu",
            f"{g['name']} x {g['devices']}: {g['memory_gib']} GiB, {arch}, "
            f"{g['multiprocessors']} multiprocessors",
        )
    machine.add_row("bf16", "yes" if report["bf16_supported"] else "no")
    machine.add_row("matmul", report["matmul_precision"])
    speeds = ", ".join(f"{k} {v:g}" for k, v in report["matmul_tflops"].items())
    machine.add_row("matmul TFLOP/s", speeds)
    machine.add_row("versions", ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    console.print(machine)
    if report["int8_models"]:
        models = Table(title="int8 ONNX models on this CPU")
        for column in ("folder", "int8 weights", "on this CPU"):
            models.add_column(column, overflow="fold")
        for m in report["int8_models"]:
            verdict = (
                "[yellow]loses accuracy (saturates): re-export with export.int8_weight_bits: 7"
                if m["warning"]
                else "keeps its accuracy"
            )
            models.add_row(m["folder"], cpu.describe(m["weights"]) or "no int8 MatMul", verdict)
        console.print(models)
    tracks = report["tracks"]
    if not tracks:
        return
    table = Table(title="what the training engine would choose", show_lines=True)
    table.add_column("choice", style="bold")
    for name, t in tracks.items():
        table.add_column(f"{name} ({t['stage']}, preset {t['preset']})")
    rows = [
        "model",
        "precision",
        "attention",
        "compile",
        "micro_batch",
        "optimizer",
        "fp8",
        "gradient_checkpointing",
        "loader",
    ]
    for row in rows:
        cells = []
        for t in tracks.values():
            value = t.get(row, "")
            if isinstance(value, dict):
                value = f"{value['value']}: {value['reason']}"
            cells.append(str(value))
        table.add_row(row, *cells)
    console.print(table)


def log_to_stderr() -> None:
    """Logs on stderr, so that stdout holds only the report (and --json parses)."""
    from rich.console import Console
    from rich.logging import RichHandler

    handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[handler])
