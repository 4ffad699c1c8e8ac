"""Stage eval: every model variant of one track on the same samples, so quantization's quality
cost is measured: the track's error rates per variant and split, each variant's difference from
the reference, and samples to look at.

Run:    dvc repro eval            (every track: eval@score, eval@speech)
        python -m tasks.eval score
Reads:  params.yaml (<track>_eval, paths; the score track also score_data.lilypond), and of
        paths.tracks.<track>: data/ (manifest, images or clips), model/ (the FP32 model: the
        reference) and every variant folder under export/ that exists (variants.discover)
Writes: under paths.tracks.<track>.eval: samples/<variant>/<split>/ (predictions.jsonl and the
        track's samples: score, worst_NN.png and random_NN.png with input, prediction render and
        truth render side by side; speech, worst.json: the worst clips with their audio paths)
        and quality.csv (dvc plots); ${paths.metrics}/<track>_eval.json (per variant and split,
        with each variant's difference from the reference)

What a track measures and shows is in its eval face (sonfolio/<track>/steps/eval.py);
the metrics' definitions: docs/evaluation.md.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import Progress

from sonfolio import parallel, tracks, variant_eval, variants
from sonfolio.config.eval import EvalParams, ScoreEval, SpeechEval
from sonfolio.config.stage import load_sections
from sonfolio.evaluation import Decoded
from sonfolio.io import read_jsonl, staged_dir, write_json
from sonfolio.logs import setup_logging

if TYPE_CHECKING:
    from sonfolio.faces import EvalFace  # annotations only: no stage dep

log = logging.getLogger(__name__)

STEP = "eval"
EvalConfig = ScoreEval | SpeechEval  # the fields read here are common to every track's section


def decode(
    track: EvalFace, v: variants.Variant, rows: list[dict], data: Path, cfg: EvalConfig
) -> list[str]:
    """Greedy (or grammar-constrained) outputs for `rows`, `cfg.batch_size` samples per
    generate call (greedy: the track's decode_workers batches side by side)."""
    hyps: list[str] = []
    options = track.decode_options(cfg)
    with Progress(transient=True) as bar:
        task = bar.add_task(f"{v.name}: decoding", total=len(rows))
        chunks = parallel.batched(rows, cfg.batch_size)
        if not options.get("constrained"):
            inputs = (track.eval_inputs(v, chunk, data) for chunk in chunks)
            workers = track.decode_workers(cfg)
            for chunk, texts in zip(
                chunks, v.generate_batches(inputs, cfg.decode_max_tokens, workers), strict=True
            ):
                hyps += texts
                bar.advance(task, len(chunk))
            return hyps
        for chunk in chunks:
            # a track with a grammar may decode under it (its eval face's decode_options), each
            # row in the time in force before it (a manifest's `time`; None where its header
            # states one)
            hyps += v.generate(
                track.eval_inputs(v, chunk, data),
                cfg.decode_max_tokens,
                times=[r.get("time") for r in chunk],
                **options,
            )
            bar.advance(task, len(chunk))
    return hyps


def _round(m: Any) -> Any:
    if isinstance(m, dict):
        return {k: _round(v) for k, v in m.items()}
    if isinstance(m, list):
        return [_round(v) for v in m]
    return round(m, 4) if isinstance(m, float) else m


def run(
    cfg: EvalConfig,
    track: EvalFace,
    data: Path,
    variant_dirs: list[Path],
    out: Path,
    metrics_path: Path,
    tool: Any = None,
    baselines: list[Path] | None = None,
    extra: Callable[[Path], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Evaluate each variant folder (the first is the reference) on cfg.splits.

    Args:
        tool: what the track's scorer runs outside Python (its eval face's eval_tool: score,
            the LilyPond binary; speech, None).
        baselines: models scored after the variants as what training started from (speech:
            the untouched base); named in the metrics' `baselines`.
        extra: the track's own figures (its eval face's eval_extra; score: whole pages read
            end to end), called with a scratch folder; merged into the metrics.

    Raises:
        VariantError: a variant folder cannot be loaded or is a model of another track.
        ValueError: a split has no samples.
    """
    rows = read_jsonl(data / "manifest.jsonl")
    splits = {s: variant_eval.eval_rows(rows, s, cfg.max_samples, cfg.seed) for s in cfg.splits}
    for split, chosen in splits.items():
        if not chosen:
            raise ValueError(
                f"{data}/manifest.jsonl has no {split!r} rows: check {track.name}_eval.splits"
            )
    start = time.perf_counter()
    with staged_dir(out / "samples") as tmp, tempfile.TemporaryDirectory() as work:
        scorer = track.eval_scorer(cfg, data, tool, Path(work))

        def one(v: variants.Variant, split: str, chosen: list[dict]) -> dict[str, Any]:
            t0 = time.perf_counter()
            hyps = decode(track, v, chosen, data, cfg)
            decode_s = time.perf_counter() - t0
            decoded = Decoded(v.name, split, chosen, hyps, decode_s)
            m = scorer.score(decoded, tmp / v.name / split)
            shown = ", ".join(f"{k} {m[k]:.3f}" for k in track.eval_delta_keys)
            log.info("%s %s: %s", v.name, split, shown)
            return _round(m)

        every = variant_dirs + (baselines or [])
        # a track with a search to spread says over how many processes (its eval face)
        workers = parallel.worker_count(track.search_workers(cfg))
        per_variant = variant_eval.evaluate_all(
            every, track.name, cfg.threads, splits, one, workers
        )
    result = variant_eval.quality_results(
        per_variant,
        variant_dirs[0].name,
        track.eval_delta_keys,
        track.eval_csv_extra,
        out / "quality.csv",
        start,
    )
    result["baselines"] = [b.name for b in baselines or []]
    if extra is not None:
        with tempfile.TemporaryDirectory() as work:
            result.update(_round(extra(Path(work))))
    write_json(metrics_path, result)
    return result


def main() -> None:
    setup_logging()
    track = tracks.from_argv(sys.argv[1:], STEP)
    params = load_sections(EvalParams)
    paths = params.paths.track(track)
    face = tracks.face(track, "eval")
    cfg = params.section(track, STEP)
    with tempfile.TemporaryDirectory(prefix=f"eval-{track}-") as work:
        # a track's baselines (speech: the untouched base, zero-shot) are scored beside them
        baselines = face.eval_baselines(cfg, paths.model, Path(work))
        run(
            cfg,
            face,
            paths.data,
            variants.discover(paths.model, paths.export),
            paths.eval,
            params.paths.metrics / f"{track}_{STEP}.json",
            face.eval_tool(params),
            baselines,
            face.eval_extra(params, paths),
        )


if __name__ == "__main__":
    main()
