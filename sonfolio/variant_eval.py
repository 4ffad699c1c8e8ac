"""The eval stage's loop over model variants: the rows every variant reads (a seeded subset, the
same for all), each variant loaded in turn and scored per split, its difference from the
reference, and quality.csv for `dvc plots`."""

from __future__ import annotations

import csv
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sonfolio import cpu, int8_weights
from sonfolio.variants import Variant, VariantError, load


def eval_rows(rows: list[dict], split: str, cap: int | None, seed: int) -> list[dict]:
    """The manifest rows of `split` that every variant is evaluated on: all of them, or a
    seeded random `cap` (the same for every variant and run), in manifest order."""
    chosen = [r for r in rows if r["split"] == split]
    if cap is not None and len(chosen) > cap:
        keep = set(random.Random(f"{seed}-{split}").sample(range(len(chosen)), cap))
        chosen = [r for i, r in enumerate(chosen) if i in keep]
    return chosen


def add_deltas(per_variant: dict[str, dict], reference: str, keys: tuple[str, ...]) -> None:
    """Add `delta_<key>` (variant minus reference, per split) to every variant's metrics, so
    quantization's quality cost is a number in the metrics, not an assumption.

    `per_variant` maps a variant name to {"splits": {split: {key: value, ...}}, ...}.
    """
    for name, entry in per_variant.items():
        for split, m in entry["splits"].items():
            ref = per_variant[reference]["splits"][split]
            for key in keys:
                m[f"delta_{key}"] = round(m[key] - ref[key], 4) if name != reference else 0.0


def evaluate_all(
    folders: list[Path],
    track: str,
    threads: int | None,
    splits: dict[str, list[dict]],
    evaluate: Callable[[Variant, str, list[dict]], dict[str, Any]],
    search_workers: int = 1,
) -> dict[str, dict]:
    """`evaluate(variant, split, rows)` for every variant folder and split, one model in
    memory at a time: {variant name: {"kind", "folder", "device", "splits": {split: metrics}}}.
    `search_workers`: each variant's `search_workers`.

    Raises:
        VariantError: a folder cannot be loaded, or holds a model of the other track.
    """
    per_variant: dict[str, dict] = {}
    for folder in folders:
        v = load(folder, threads=threads)
        if v.track != track:
            raise VariantError(f"{folder} is a {v.track} model, not a {track} model")
        v.search_workers = search_workers
        entry = {"kind": v.kind, "folder": str(folder), "device": v.device, "splits": {}}
        if v.kind != "torch" and (weights := int8_weights.int8_weight_range(folder)):
            entry["int8_weights"] = weights
        for split, rows in splits.items():
            entry["splits"][split] = evaluate(v, split, rows)
        per_variant[v.name] = entry
        del v
    return per_variant


def quality_results(
    per_variant: dict[str, dict],
    reference: str,
    keys: tuple[str, ...],
    extra: str,
    csv_path: Path,
    started: float,
) -> dict[str, Any]:
    """Deltas against `reference` added, the per-variant CSV for `dvc plots show` written
    (one row per variant and split: `keys` and `extra`), and the stage's metrics returned."""
    add_deltas(per_variant, reference, keys)
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["variant", "kind", "split", "run", *keys, extra])
        for name, entry in per_variant.items():
            for split, m in entry["splits"].items():
                w.writerow(
                    [name, entry["kind"], split, f"{name} {split}"] + [m[k] for k in (*keys, extra)]
                )
    tmp.replace(csv_path)
    return {
        "reference": reference,
        "variants": per_variant,
        "seconds": round(time.perf_counter() - started, 1),
        "cpu": cpu.isa(),  # int8 quality depends on it (sonfolio.cpu)
    }
