"""Fine-tuning that keeps real speech: train@speech under each candidate setting, each result
read on the synthetic test split and on the real voice, beside the untouched base.

Run:    python -m benchmarks.speech_keep [--root RUN] [--only NAME ...]
Reads:  this checkout's params.yaml and RUN's speech tokenizer: run `dvc repro tokenizer@speech`
        there first. Each setting's data stage (with the real voice, <data>/real/) runs in its
        folder.
Writes: benchmarks/results/speech_keep.json and prints a table: per setting, the overrides, the
        test split's WER / CER as the train stage measures them (sentences and voices never
        heard in training), the real voice's WER / CER as eval@speech reads it (every clip
        that speech_eval.real admits), and the training minutes; the untouched base's real
        figures beside (speech_eval.zero_shot_base, read the same way).

Each setting trains in RUN/benchmarks/speech_keep/<name>/ (params.yaml with its overrides, its
own data stage, the run's tokenizer linked) in a fresh process, `python -m tasks.train speech`,
so what is measured is the train stage itself. The real voice is never trained or tuned on
(issue 34): these figures choose a method, once, for docs/training.md; the defaults then change
in params.yaml.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

import benchmarks
from benchmarks import console, earlier_result, override, publish, run_stage, settings_parser
from sonfolio import cpu

RESULTS = Path("benchmarks/results/speech_keep.json")
REPO = Path(__file__).resolve().parents[1]

# name -> params overrides: dotted keys under speech_train or speech_data (every setting's data
# stage runs in its own folder from the same seed: val and test come out the same whatever the
# train additions). Overrides are relative to today's params.yaml (decoder_trains:
# cross_attention, no augmentation, no everyday talk); ALL_DECODER is the default before it.
ALL_DECODER = {"speech_train.model.decoder_trains": "all"}
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "decoder_blocks": {"speech_train.model.decoder_trains": "blocks"},
    # the encoder as the base's too: only the decoder's attention to the audio trains
    "cross_attention_only": {"speech_train.model.frozen_encoder_layers": 6},
    "cross_attention_keep_base_1": {"speech_train.keep_base": 1.0},
    # the whole decoder training (the default before), with train-only data additions
    # (speech_data.synthetic, docs/speech.md) or a method that keeps the base
    "augment": {**ALL_DECODER, "speech_data.synthetic.augment.enabled": True},
    "augment_spoken": {
        **ALL_DECODER,
        "speech_data.synthetic.augment.enabled": True,
        "speech_data.synthetic.spoken_fraction": 0.5,
    },
    "spoken": {**ALL_DECODER, "speech_data.synthetic.spoken_fraction": 0.5},
    "decoder_frozen": {**ALL_DECODER, "speech_train.model.frozen_decoder_layers": 6},
    "encoder_frozen": {**ALL_DECODER, "speech_train.model.frozen_encoder_layers": 6},
    "lr_3e-5": {**ALL_DECODER, "speech_train.lr": 3.0e-5},
    "keep_base_1": {**ALL_DECODER, "speech_train.keep_base": 1.0},
    "keep_base_4": {**ALL_DECODER, "speech_train.keep_base": 4.0},
}


def _override(params: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    return override(params, overrides, ("speech_train", "speech_data"), "benchmarks.speech_keep")


def _workdir(root: Path, name: str, overrides: dict[str, Any]) -> Path:
    """RUN/benchmarks/speech_keep/<name>/ with this checkout's params.yaml overridden, RUN's
    tokenizer linked, and the data stage run there."""
    from sonfolio.config.params import load_params

    paths = load_params(REPO / "params.yaml").paths.track("speech")
    work = root / "benchmarks" / "speech_keep" / name
    work.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    (work / "params.yaml").write_text(yaml.safe_dump(_override(params, overrides)), "utf-8")
    link = work / paths.tokenizer
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to((root / paths.tokenizer).resolve(), target_is_directory=True)
    if (work / paths.data).is_symlink():  # linked to RUN's data by an earlier version
        (work / paths.data).unlink()
    run_stage(work, "tasks.data", "speech")
    return work


def train(work: Path) -> dict[str, Any]:
    """The train stage in `work`, in a fresh process; its metrics."""
    from sonfolio.config.params import load_params

    run_stage(work, "tasks.train", "speech")
    metrics = load_params(work / "params.yaml").paths.metrics
    return json.loads((work / metrics / "speech_train.json").read_text(encoding="utf-8"))


def read_real(work: Path, base: bool) -> dict[str, Any]:
    """The trained model (and the untouched base, if `base`) on the real voice, as eval@speech
    reads it."""
    from sonfolio.config.params import load_params
    from sonfolio.speech.eval.evaluate import zero_shot_base
    from sonfolio.speech.eval.real import evaluate_real

    params = load_params(work / "params.yaml")
    paths, cfg = params.paths.track("speech"), params.speech_eval
    model, scratch = work / paths.model, work / "real_eval"
    base_folder = zero_shot_base(cfg.zero_shot_base, model, scratch / "base") if base else None
    return evaluate_real(
        cfg, params.infer, work / paths.data, [model], base_folder, scratch / "samples",
        scratch / "read",
    )  # fmt: skip


def table(result: dict[str, Any]) -> Table:
    t = Table(title="speech fine-tuning: the test split and the real voice")
    for col in (
        "setting",
        "overrides",
        "augment, talk",
        "test WER",
        "test CER",
        "real WER",
        "real CER",
        "min",
    ):
        t.add_column(col, justify="left" if col in ("setting", "overrides") else "right")
    base = result.get("base_real")
    if base:
        t.add_row("untouched base", "", "", "", f"{base['wer']:.3f}", f"{base['cer']:.3f}", "")
    for name, r in result["settings"].items():
        t.add_row(
            name,
            json.dumps(r["overrides"]),
            f"{'yes' if r.get('augment') else 'no'}, {r.get('spoken_fraction', 0.0):.0%}",
            f"{r['test_wer']:.3f}",
            f"{r['test_cer']:.3f}",
            f"{r['real_wer']:.3f}",
            f"{r['real_cer']:.3f}",
            f"{r['train_minutes']:.1f}",
        )
    return t


def main() -> None:
    args = settings_parser(__doc__, SETTINGS, RESULTS).parse_args()
    result = earlier_result(args.out)
    from sonfolio.config.params import load_params

    load_before = cpu.load_average()
    for name in args.only or list(SETTINGS):
        work = _workdir(args.root, name, SETTINGS[name])
        synthetic = load_params(work / "params.yaml").speech_data.synthetic
        trained = train(work)
        real = read_real(work, base="base_real" not in result)
        model = next(n for n in real["variants"] if n != real["base"])
        if real["base"]:
            result["base_real"] = real["variants"][real["base"]]
        result["settings"][name] = {
            "overrides": SETTINGS[name],
            "augment": synthetic.augment.enabled,
            "spoken_fraction": synthetic.spoken_fraction,
            "test_wer": trained["test_wer"],
            "test_cer": trained["test_cer"],
            "real_wer": real["variants"][model]["wer"],
            "real_cer": real["variants"][model]["cer"],
            "real_clips": real["clips"],
            "train_minutes": trained["train_minutes"],
            "best_step": trained["best_step"],
        }
        benchmarks.stamp_conditions(result, name, load_before)
        # written after each setting: a long run keeps what it measured
        publish(args.out, result, lambda r: console(150).print(table(r)))


if __name__ == "__main__":
    main()
