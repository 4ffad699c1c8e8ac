"""`sonfolio estimate`: what a training run costs, from steps measured on this machine.

For each track it builds the configured model and data exactly as the training stage does
(its train face's `training`, sonfolio/<track>/model/training.py, on the real data
folders), runs real
optimizer steps through the engine (`sonfolio.train.run.Run.step`, the first `warmup_steps`
untimed), and turns the measured seconds per step into hours and dollars for a target number
of steps on each GPU of a price table (sonfolio/gpu_prices.yaml, or `estimate.prices`).

What is measured and what is assumed (docs/cost.md):
- measured: seconds per step here, the step's FLOPs (the track's ~6 x params x tokens), and,
  when this machine has a GPU listed in the table, that GPU's row;
- assumed, and labelled so in every row: another GPU's step time = FLOPs / (its dense bf16
  peak x an assumed MFU) + a fixed per-step overhead (both in the price table); on a GPU,
  other GPUs are scaled from the measured step by their peak ratio.
"""

from __future__ import annotations

import importlib.resources
import logging
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import torch
import yaml
from pydantic import Field, ValidationError, field_validator
from torch.utils.data import Dataset

from sonfolio import tracks
from sonfolio.config.base import Strict
from sonfolio.train.device import Backend, choose_precision, detect_backend
from sonfolio.train.observe import peak_flops
from sonfolio.train.run import Run, RunPaths, Track

if TYPE_CHECKING:
    from sonfolio.config.estimate import EstimateParams
    from sonfolio.config.params import Params
    from sonfolio.config.train import EngineOptions, TrainLoop

log = logging.getLogger(__name__)

ASSUMED = "assumed"


class MissingInput(FileNotFoundError):
    """A track's data or tokenizer is not there yet; the message names the stage to run."""


class PriceTableError(ValueError):
    """The price table is missing or invalid; the message names the entry and the fix."""


# --- the price table ------------------------------------------------------------------------
class Price(Strict):
    provider: Annotated[str, Field(min_length=1)]
    usd_per_gpu_hour: Annotated[float, Field(gt=0.0)]
    as_of: Annotated[str, Field(min_length=4)]  # the date the source gives (YYYY[-MM[-DD]])
    found: date  # when the price was read from the source
    source: str  # a URL, or "assumed" where no published price was found
    note: str | None = None

    @field_validator("source")
    @classmethod
    def _url_or_assumed(cls, value: str) -> str:
        if value != ASSUMED and not value.startswith(("https://", "http://")):
            raise ValueError(f"source {value!r} must be an http(s) URL or {ASSUMED!r}")
        return value


class Gpu(Strict):
    name: Annotated[str, Field(min_length=1)]
    match: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    peak_bf16_tflops: Annotated[float, Field(gt=0.0)]
    peak_source: Annotated[str, Field(min_length=1)]
    mfu: Annotated[float, Field(gt=0.0, le=1.0)]  # assumed
    prices: Annotated[list[Price], Field(min_length=1)]


class Assumptions(Strict):
    step_overhead_ms: Annotated[float, Field(ge=0.0)]
    step_overhead_source: Annotated[str, Field(min_length=1)]
    mfu_source: Annotated[str, Field(min_length=1)]


class PriceTable(Strict):
    assumptions: Assumptions
    gpus: Annotated[list[Gpu], Field(min_length=1)]


def load_prices(path: Path | None) -> tuple[PriceTable, str]:
    """The price table at `path`, or the one shipped with the package; and where it came from.

    Raises:
        PriceTableError: naming every bad entry.
    """
    if path is None:
        resource = importlib.resources.files("sonfolio") / "gpu_prices.yaml"
        text, origin = resource.read_text(encoding="utf-8"), "sonfolio/gpu_prices.yaml"
    else:
        if not path.is_file():
            raise PriceTableError(f"estimate.prices = {path}: no such file (null: the shipped one)")
        text, origin = path.read_text(encoding="utf-8"), str(path)
    try:
        return PriceTable.model_validate(yaml.safe_load(text)), origin
    except (ValidationError, yaml.YAMLError) as err:
        raise PriceTableError(f"{origin} is invalid: {err}") from None


def matching_gpu(device_name: str, gpus: list[Gpu]) -> Gpu | None:
    """The table's entry for a device name: all its `match` strings in the name; the longest
    match wins (an A100 also contains "A10")."""
    hits = [g for g in gpus if all(s in device_name for s in g.match)]
    return max(hits, key=lambda g: sum(map(len, g.match)), default=None)


# --- measuring steps ------------------------------------------------------------------------
class Sample(Dataset):
    """A seeded random subset of a dataset, enough for the timed steps: so that the CPU
    default's preloading (sonfolio.train.speed.loader_workers) decodes only what is used."""

    def __init__(self, dataset: Any, n: int, seed: int) -> None:
        self.dataset = dataset
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))
        self.indices = order[: min(n, len(dataset))].tolist()
        self._cache: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.indices)

    def preload(self) -> None:
        if self._cache is None:
            self._cache = [self.dataset[i] for i in self.indices]

    def __getitem__(self, i: int) -> Any:
        return self._cache[i] if self._cache is not None else self.dataset[self.indices[i]]


@dataclass
class Measurement:
    """Real optimizer steps of one track's configured model on this machine."""

    track: str
    stage: str
    backend: str
    device: str
    precision: str
    parameters: int
    effective_batch: int
    micro_batch: int
    accumulation: int
    warmup_steps: int
    step_seconds: list[float]  # each timed step
    flops_per_step: float  # ~6 x params x tokens x effective batch (Track.flops_per_sample)
    choices: dict[str, str] = field(default_factory=dict)

    @property
    def seconds_per_step(self) -> float:
        return statistics.fmean(self.step_seconds)


def measure(
    track: Track,
    loop: TrainLoop,
    opts: EngineOptions,
    steps: int,
    warmup: int,
    batch_cache: Path,
) -> Measurement:
    """Time `steps` optimizer steps of the engine after `warmup` untimed ones.

    The engine's Run does everything a training run does before its first step (precision,
    micro-batch search, compile, optimizer, data loader); nothing is saved.
    """
    n_train = (steps + warmup) * loop.effective_batch
    train = Sample(track.train_set, n_train, loop.seed)
    lengths = None if track.lengths is None else [track.lengths[i] for i in train.indices]
    track = replace(
        track,
        train_set=train,
        val_set=Sample(track.val_set, loop.effective_batch, loop.seed),
        lengths=lengths,
    )
    with tempfile.TemporaryDirectory(prefix="sonfolio-estimate-") as tmp:
        run = Run(track, loop, opts, RunPaths(Path(tmp), None, batch_cache))
        for _ in range(warmup):  # allocator, thread pools, compile, first batches
            run.step()
        seconds = []
        for i in range(steps):
            start = time.perf_counter()
            info = run.step()  # ends with loss.item(): the device has finished the step
            seconds.append(time.perf_counter() - start)
            log.info("%s: step %d of %d took %.3f s", track.name, i + 1, steps, seconds[-1])
            if not info["advanced"]:
                log.warning("%s: a timed step was skipped by the NaN guard", track.name)
    return Measurement(
        track=track.name.removesuffix("_train"),
        stage=track.name,
        backend=run.backend.kind,
        device=run.backend.name,
        precision={"no": "fp32"}.get(run.precision, run.precision),
        parameters=track.model.num_parameters(),
        effective_batch=loop.effective_batch,
        micro_batch=run.micro,
        accumulation=run.accum,
        warmup_steps=warmup,
        step_seconds=seconds,
        flops_per_step=track.flops_per_sample * loop.effective_batch,
        choices=dict(run.choices),
    )


# --- from a measurement to hours and dollars --------------------------------------------------
def gpu_step_seconds(m: Measurement, gpu: Gpu, table: PriceTable) -> tuple[float, str]:
    """(seconds per step on `gpu`, how that was obtained: "measured ..." or "assumed: ...")."""
    overhead = table.assumptions.step_overhead_ms / 1000
    here = matching_gpu(m.device, table.gpus) if m.backend != "cpu" else None
    if here is not None and here.name == gpu.name:
        return m.seconds_per_step, f"measured on this {m.device}"
    if m.backend != "cpu":
        peak, _ = peak_flops_of(m)
        if peak:
            ratio = peak / (gpu.peak_bf16_tflops * 1e12)
            return max(overhead, m.seconds_per_step * ratio), (
                f"assumed: step measured on {m.device} x peak ratio {ratio:.2f}"
            )
    compute = m.flops_per_step / (gpu.peak_bf16_tflops * 1e12 * gpu.mfu)
    return compute + overhead, (
        f"assumed: {gpu.peak_bf16_tflops:g} TFLOP/s x MFU {gpu.mfu:.0%} "
        f"+ {table.assumptions.step_overhead_ms:g} ms/step overhead"
    )


def peak_flops_of(m: Measurement) -> tuple[float | None, str]:
    return peak_flops(Backend(m.backend, m.device, None))  # type: ignore[arg-type]


def price_rows(m: Measurement, table: PriceTable, targets: dict[str, int]) -> list[dict[str, Any]]:
    """One row for this machine (measured, no price) and one per GPU and provider: seconds per
    step, speed-up over this machine, and hours and USD for each target number of steps."""

    def row(gpu: str, provider: str, price: Price | None, seconds: float, basis: str) -> dict:
        hours = {k: steps * seconds / 3600 for k, steps in targets.items()}
        usd = price.usd_per_gpu_hour if price else None
        return {
            "gpu": gpu,
            "provider": provider,
            "usd_per_gpu_hour": usd,
            "price_as_of": price.as_of if price else None,
            "price_found": price.found.isoformat() if price else None,
            "price_source": price.source if price else None,
            "price_note": price.note if price else None,
            "seconds_per_step": seconds,
            "speedup": m.seconds_per_step / seconds,
            "speedup_basis": basis,
            "assumed": basis.startswith(ASSUMED),
            "hours": hours,
            "cost_usd": {k: h * usd for k, h in hours.items()} if usd is not None else None,
        }

    rows = [row(m.device, "this machine", None, m.seconds_per_step, "measured")]
    for gpu in table.gpus:
        seconds, basis = gpu_step_seconds(m, gpu, table)
        rows += [row(gpu.name, p.provider, p, seconds, basis) for p in gpu.prices]
    return rows


# --- the tracks, as their stages build them ------------------------------------------------------
def _require(path: Path, what: str, stage: str) -> None:
    if not path.exists():
        raise MissingInput(
            f"{path} not found ({what}): run the {stage} stage first (`dvc repro {stage}`)"
        )


def build_track(
    name: str, params: EstimateParams | Params
) -> tuple[Track, TrainLoop, EngineOptions]:
    """The track's model and datasets, exactly as its training stage builds them (its
    train face's `training`).

    Raises:
        UnknownTrack: no track of that name.
        MissingInput: naming the stage that makes the missing data or tokenizer.
        DeviceCannotDo: a model size or precision this device cannot train, as the stage would.
    """
    training = tracks.face(name, "train").training(params)
    own = params.paths.track(name)
    _require(own.data / "manifest.jsonl", f"the {name} data", f"data@{name}")
    _require(own.tokenizer / "tokenizer.json", f"the {name} tokenizer", f"tokenizer@{name}")
    opts = params.engine_options(training.cfg.preset)
    backend = detect_backend()
    training.check_size(backend)
    choose_precision(opts.precision, backend)
    return training.setup(own.data, own.tokenizer).track, training.cfg, opts


def estimate(
    params: EstimateParams | Params,
    tracks: list[str],
    steps: int | None = None,
    target_steps: int | None = None,
    matmul_seconds: float = 1.0,
) -> dict[str, Any]:
    """Measure each track and price it; the `--json` output. Steps default to
    `estimate.steps`; the target to each stage's max_steps (and `estimate.full_run_steps`)."""
    from sonfolio.doctor import matmul_speeds

    cfg = params.estimate
    table, origin = load_prices(cfg.prices)
    backend = detect_backend()
    out: dict[str, Any] = {
        "device": backend.name,
        "backend": backend.kind,
        "matmul_tflops": {},  # timed after the steps, on a machine at rest
        "prices": origin,
        "assumptions": table.assumptions.model_dump(),
        "tracks": {},
    }
    for name in tracks:
        track, loop, opts = build_track(name, params)
        m = measure(
            track,
            loop,
            opts,
            steps or cfg.steps,
            cfg.warmup_steps,
            params.paths.checkpoints / "micro_batch.json",
        )
        targets = {
            "max_steps": target_steps or loop.max_steps,
            "full_run": getattr(cfg.full_run_steps, name),
        }
        out["tracks"][name] = {
            **asdict(m),
            "seconds_per_step": m.seconds_per_step,
            "achieved_tflops": m.flops_per_step / m.seconds_per_step / 1e12,
            "targets": targets,
            "rows": price_rows(m, table, targets),
        }
    out["matmul_tflops"] = matmul_speeds(backend, matmul_seconds)
    return out


# --- output ---------------------------------------------------------------------------------------
def _money(usd: float | None) -> str:
    if usd is None:
        return "-"
    return f"${usd:,.2f}" if usd >= 0.01 else f"${usd:.4f}"


def _hours(h: float) -> str:
    return f"{h:,.2f} h" if h >= 0.1 else f"{h * 60:.1f} min"


def render(report: dict[str, Any], console: Any) -> None:
    """The report as rich tables, one per track; assumed speed-ups marked with *."""
    from rich.table import Table

    speeds = ", ".join(f"{k} {v:g}" for k, v in report["matmul_tflops"].items())
    console.print(f"[bold]{report['device']}[/]: timed matmul {speeds} TFLOP/s")
    for name, t in report["tracks"].items():
        max_steps, full = t["targets"]["max_steps"], t["targets"]["full_run"]
        console.print(
            f"\n[bold]{name}[/] ({t['stage']}, {t['parameters'] / 1e6:.2f} M parameters, "
            f"batch {t['effective_batch']} = {t['micro_batch']} x {t['accumulation']}, "
            f"{t['precision']}): [bold]{t['seconds_per_step']:.3f} s/step[/] measured over "
            f"{len(t['step_seconds'])} steps after {t['warmup_steps']} warm-up; "
            f"{t['flops_per_step'] / 1e9:.1f} GFLOP/step = {t['achieved_tflops']:.4f} TFLOP/s"
        )
        table = Table()
        for col in ("GPU", "provider", "$/GPU-h", "speed-up"):
            table.add_column(col)
        table.add_column(f"{max_steps:,} steps\n(max_steps)", justify="right")
        table.add_column(f"{full:,} steps\n(full run)", justify="right")
        for r in t["rows"]:
            cost = r["cost_usd"] or {}
            table.add_row(
                r["gpu"],
                r["provider"],
                _money(r["usd_per_gpu_hour"]),
                f"{r['speedup']:,.1f}x" + ("*" if r["assumed"] else ""),
                f"{_hours(r['hours']['max_steps'])} {_money(cost.get('max_steps'))}",
                f"{_hours(r['hours']['full_run'])} {_money(cost.get('full_run'))}",
            )
        console.print(table)
    a = report["assumptions"]
    console.print(
        f"* assumed: each GPU's dense bf16 peak x an assumed MFU ({report['prices']}) + "
        f"{a['step_overhead_ms']:g} ms/step fixed overhead. Prices: one GPU, on demand; their "
        "dates and sources are in --json and the price file (docs/cost.md)."
    )
