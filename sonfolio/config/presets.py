"""Named sets of params.yaml overrides that span several sections, for `dvc exp run -S`.

`speech-from-scratch` trains the tiny speech Whisper from scratch with a project BPE tokenizer
(the speech default until 2026-11-25; the tests run it): `sonfolio preset speech-from-scratch`
prints the `-S key=value` arguments, so `dvc exp run $(sonfolio preset speech-from-scratch)` runs
it, and `apply` lays it over a raw params mapping (the tests).
"""

from __future__ import annotations

import copy
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "speech-from-scratch": {
        "speech_data.synthetic.utterances": 4000,
        "speech_tokenizer.base_model": None,
        "speech_train.model.base_model": None,
        "speech_train.model.language": None,
        "speech_train.model.frozen_encoder_layers": 0,
        "speech_train.model.frozen_decoder_layers": 0,
        "speech_train.model.decoder_trains": "all",
        "speech_train.keep_base": 0.0,
        "speech_train.effective_batch": 32,
        "speech_train.lr": 2.0e-3,
        "speech_train.warmup_steps": 100,
        "speech_train.max_steps": 600,
        "speech_train.eval_every": 100,
        "speech_train.checkpoint_every": 100,
        "speech_train.ctc_weight": 0.3,
        "speech_train.ctc_pool": 2,
        "speech_qat.effective_batch": 32,
        "speech_qat.lr": 3.0e-4,
        "speech_qat.max_steps": 60,
        "speech_qat.eval_every": 30,
        "speech_qat.checkpoint_every": 30,
        "speech_qat.warmup_steps": 10,
        "speech_qat.log_every": 10,
        "speech_eval.splits": ["test", "val"],
        "speech_eval.zero_shot_base": None,
        "speech_bench.faster_whisper_base": None,
    }
}


class PresetError(KeyError):
    """An unknown preset, or a preset key params.yaml does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


def _get(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise PresetError(f"no preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def _yaml_value(value: Any) -> str:
    """The value as `-S` reads it (YAML): None as null, a list as [a,b]."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(_yaml_value(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def exp_run_args(name: str) -> list[str]:
    """`-S key=value` pairs for `dvc exp run` (YAML values: None as null)."""
    return [arg for k, v in _get(name).items() for arg in ("-S", f"{k}={_yaml_value(v)}")]


def apply(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of the raw params mapping `raw` with preset `name` laid over it.

    Raises:
        PresetError: an unknown preset, or a key whose parent section `raw` lacks.
    """
    out = copy.deepcopy(raw)
    for dotted, value in _get(name).items():
        *parents, leaf = dotted.split(".")
        node = out
        for key in parents:
            if not isinstance(node.get(key), dict):
                raise PresetError(f"preset {name}: {dotted} is not a params.yaml key")
            node = node[key]
        if leaf not in node:
            raise PresetError(f"preset {name}: {dotted} is not a params.yaml key")
        node[leaf] = value
    return out
