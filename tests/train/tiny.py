"""A tiny score dataset and run, shared by the engine tests and run in subprocesses
(`python tests/train/tiny.py ...`, also under torchrun) for the crash-resume and
data-parallel tests.

The images are real PNG files: each system's LilyPond text drawn with PIL (what the model reads
is the text's own glyphs, so a tiny model can learn it); the tokenizer is the project's BPE
trained in-process. Seconds, not minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from sonfolio.config.params import load_params
from sonfolio.config.train import EngineOptions, ScoreTrain
from sonfolio.io import write_jsonl
from sonfolio.tokenizer import train_bpe

ROOT = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 128, 32  # px: the tiny systems
NOTES = ["c'4", "d'4", "e'8", "f'8", "g'2", "a'4", "b'4", "c''4", "|"]
# a training loop of 2 steps of 8 samples, logged at each and evaluated after the last (either
# track's *_train keys): what the pinned-loss tests run
TWO_STEPS = {
    "effective_batch": 8,
    "max_steps": 2,
    "warmup_steps": 0,
    "eval_every": 2,
    "log_every": 1,
    "decode_max_tokens": 4,
}


def make_score_data(folder: Path, per_split: dict[str, int], seed: int = 0) -> Path:
    """images/<split>/NNN.png + manifest.jsonl + tokenizer/ under `folder`."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for split, n in per_split.items():
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            text = " ".join(rng.choice(NOTES) for _ in range(rng.randint(2, 4)))
            img = Image.new("L", (WIDTH, rng.randint(20, 40)), 255)
            ImageDraw.Draw(img).text((2, 4), text, fill=0)
            rel = f"images/{split}/{i:03d}.png"
            img.save(folder / rel)
            rows.append(
                {"image": rel, "text": text, "piece": f"p{i}", "collection": "t", "split": split}
            )
    write_jsonl(folder / "manifest.jsonl", rows)
    tok = train_bpe([r["text"] for r in rows if r["split"] == "train"], 300, 1, 32)
    tok.save_pretrained(str(folder / "tokenizer"))
    return folder


def tiny_config(**loop: Any) -> tuple[ScoreTrain, EngineOptions]:
    """The real params.yaml's score_train and default engine, shrunk to a tiny model."""
    params = load_params(ROOT / "params.yaml")
    cfg = params.score_train
    shape = {"image_height": HEIGHT, "patch": (32, 8), **loop.pop("model", {})}
    model = cfg.model.model_copy(update=shape)
    # seed 0 whatever the default's: the pinned losses are what training computes from it
    base = {"model": model, **TWO_STEPS, "checkpoint_every": 100, "lr": 3e-3, "seed": 0}
    opts = params.engine_options("default")
    engine = loop.pop("engine", {})
    return cfg.model_copy(update={**base, **loop}), opts.model_copy(update=engine)


def run_tiny(data: Path, out: Path, **loop: Any) -> dict[str, Any]:
    from sonfolio.score.model.training import ScoreTraining
    from tasks.train import run

    cfg, opts = tiny_config(**loop)
    return run(
        "score",
        ScoreTraining(cfg, WIDTH),
        opts,
        data,
        data / "tokenizer",
        out / "model",
        out / "metrics.json",
        out / "checkpoints",
        out / "live",
    )


def run_qat(score_data: Path, fp32: Path, out: Path, **loop: Any) -> dict[str, Any]:
    """The real qat stage's run on a model trained by run_tiny (`fp32`): `loop` overrides
    score_qat's keys (`schemes`: which)."""
    from sonfolio import tracks
    from sonfolio.config.qat import QatTrain
    from sonfolio.score.model.training import ScoreTraining
    from tasks.qat import run

    train_cfg, opts = tiny_config()
    cfg_loop = {"max_steps": 4, "eval_every": 2, "checkpoint_every": 2, "ctc_weight": 0.3}
    cfg_loop.update(loop)
    schemes = cfg_loop.pop("schemes", ["int8", "int4"])
    fields = {k: v for k, v in train_cfg.model_dump().items() if k in QatTrain.model_fields}
    cfg = QatTrain.model_validate(
        {**fields, **cfg_loop, "schemes": schemes, "int4_group_size": 16, "lr": 3e-4}
    )
    return run(
        tracks.face("score", "qat"),
        cfg,
        ScoreTraining(train_cfg, WIDTH),
        opts,
        score_data,
        score_data / "tokenizer",
        fp32,
        out / "qat",
        out / "metrics.json",
        out / "checkpoints",
        None,
        7,
    )


def subprocess_env() -> dict[str, str]:
    """For training subprocesses: the repo importable, offline, one thread each."""
    root = ROOT
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests" / "train")]),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--loop", default="{}", help="JSON: the stage's keys to override")
    parser.add_argument("--qat", type=Path, help="run QAT on this trained model, not training")
    parser.add_argument(
        "--lag", type=float, default=0, help="s: the other processes read the best weights late"
    )
    args = parser.parse_args(argv)
    if args.lag and os.environ.get("RANK", "0") != "0":
        _lag_best_weights(args.lag)
    if args.qat:
        run_qat(args.data, args.qat, args.out, **json.loads(args.loop))
    else:
        run_tiny(args.data, args.out, **json.loads(args.loop))


def _lag_best_weights(seconds: float) -> None:
    """This process reads the best weights `seconds` late: the main process, which removes
    the run's folder once it has saved the model, must wait for it."""
    import time

    from sonfolio.train import engine

    best_model = engine.best_model

    def late(run: Any) -> Any:
        time.sleep(seconds)
        best = run.paths.checkpoints / "best" / "config.json"
        # best_model skips a folder that is gone: this process would go on with its last
        # weights, or fail when the folder goes mid-read
        assert best.is_file(), f"{best} was removed before this process read it"
        return best_model(run)

    engine.best_model = late


if __name__ == "__main__":
    main(sys.argv[1:])
