"""A model folder's decoder prompt: the tokens greedy decoding starts from, the end token,
and the tokens it must never pick, as transformers' `generate` reads them from the folder's
generation_config.json (config.json where that file lacks a token id).

Mirrors transformers 4.57 for a greedy, short-form decode (sonfolio.infer.ortloop.OrtGreedy
runs it):
- Whisper (`WhisperGenerationMixin._retrieve_init_tokens`): decoder_start_token_id, then the
  language (`language`: "fr", "<|fr|>" or "french", looked up in `lang_to_id`), the task
  (`task_to_id[task]`, transcribe when a language is set without one) and
  `no_timestamps_token_id` unless `return_timestamps`; a config without `task` and `language`
  takes its prompt from `forced_decoder_ids` (generation config, else config.json), as
  transformers does for the original checkpoints. openai/whisper-base in French:
  50258 <|startoftranscript|>, 50265 <|fr|>, 50359 <|transcribe|>, 50363 <|notimestamps|>.
- any other model: decoder_start_token_id alone.
- both: `suppress_tokens` at every step, `begin_suppress_tokens` at the first generated one.

A config that asks for what a plain greedy loop does not do (timestamps, language detection,
repetition penalties, ...) raises UnsupportedDecoding, so the caller keeps HF generate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GENERATION = "generation_config.json"
CONFIG = "config.json"

# generation config keys read below, or that change nothing in a greedy short-form decode of
# `new` tokens: callers ask greedy decoding and their own length themselves (num_beams=1,
# do_sample=False, max_new_tokens); pad_token_id only fills finished sequences
_READ = {"decoder_start_token_id", "eos_token_id", "suppress_tokens", "begin_suppress_tokens"}
_INERT = {
    "_from_model_config",
    "transformers_version",
    "bos_token_id",
    "pad_token_id",
    "max_length",
    "max_new_tokens",
    "use_cache",
    "do_sample",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
}
_WHISPER_READ = {
    "forced_decoder_ids",
    "lang_to_id",
    "task_to_id",
    "language",
    "task",
    "no_timestamps_token_id",
    "return_timestamps",
    "is_multilingual",  # checks generate's own language / task arguments only
}
# used only with timestamps, word timestamps or prompt_ids
_WHISPER_INERT = {"alignment_heads", "max_initial_timestamp_index", "prev_sot_token_id"}
# transformers 4.57's GenerationConfig() defaults that are not None: a key holding its default
# asks for nothing. Written out so that reading a prompt needs no transformers (the inference
# path runs without it, sonfolio.model_folder); tests/test_prompt.py holds it to
# GenerationConfig().to_dict(), so an upgrade that adds or changes one fails there.
GENERATION_DEFAULTS: dict[str, object] = {
    "max_length": 20,
    "min_length": 0,
    "early_stopping": False,
    "do_sample": False,
    "num_beams": 1,
    "use_cache": True,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "renormalize_logits": False,
    "remove_invalid_values": False,
    "token_healing": False,
    "num_return_sequences": 1,
    "output_attentions": False,
    "output_hidden_states": False,
    "output_scores": False,
    "return_dict_in_generate": False,
    "encoder_no_repeat_ngram_size": 0,
    "is_assistant": False,
    "num_assistant_tokens": 20,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.4,
    "assistant_lookbehind": 10,
    "target_lookbehind": 10,
    "disable_compile": False,
    "diversity_penalty": 0.0,
    "num_beam_groups": 1,
    "_from_model_config": False,
}


class PromptError(ValueError):
    """A generation config that gives no valid prompt; the message names the file and key."""


class UnsupportedDecoding(ValueError):
    """A generation config asking for more than a greedy loop over a fixed prompt does; the
    message says what (HF generate decodes such a model)."""


@dataclass(frozen=True)
class DecoderPrompt:
    """What a greedy decode of one model starts from and must avoid.

    Attributes:
        ids: the tokens fed before the first generated one, e.g. [start] or Whisper's
            [<|startoftranscript|>, <|fr|>, <|transcribe|>, <|notimestamps|>].
        eos: the end token.
        suppress: never generated (`suppress_tokens`).
        begin_suppress: not generated first, at position len(ids) (`begin_suppress_tokens`).
    """

    ids: list[int]
    eos: int
    suppress: list[int] = field(default_factory=list)
    begin_suppress: list[int] = field(default_factory=list)


def read(folder: Path) -> DecoderPrompt:
    """The prompt that transformers' greedy `generate` uses for the model in `folder`.

    Raises:
        PromptError: config.json or generation_config.json is unreadable, or a key is missing
            or invalid (the language is not in lang_to_id, ...); the message names the key.
        UnsupportedDecoding: the generation config asks for more than a fixed prompt and
            suppressed tokens (timestamps, language detection, a repetition penalty, ...).
    """
    folder = Path(folder)
    model = _json(folder / CONFIG)
    path = folder / GENERATION
    if not path.is_file():
        raise UnsupportedDecoding(f"{path} is missing: generate derives one from {CONFIG}")
    gen = _json(path)
    whisper = model.get("model_type") == "whisper"
    _check_supported(gen, whisper, path)
    start = _token(gen, model, "decoder_start_token_id", path)
    ids = _whisper_ids(gen, model, start, path) if whisper else [start]
    return DecoderPrompt(
        ids=ids,
        eos=_token(gen, model, "eos_token_id", path),
        suppress=_tokens(gen, "suppress_tokens", path),
        begin_suppress=_tokens(gen, "begin_suppress_tokens", path),
    )


def _json(path: Path) -> dict[str, Any]:
    from sonfolio.model_folder import FolderError, read_json

    try:
        return read_json(path)
    except FolderError as err:
        raise PromptError(str(err)) from err


def _check_supported(gen: dict[str, Any], whisper: bool, path: Path) -> None:
    """Every key is read here, changes nothing in a greedy decode, or holds its default."""
    known = _READ | _INERT | ((_WHISPER_READ | _WHISPER_INERT) if whisper else set())
    defaults = GENERATION_DEFAULTS
    for key, value in gen.items():
        if key in known or value is None or (key in defaults and value == defaults[key]):
            continue
        raise UnsupportedDecoding(f"{path} sets {key} = {value!r}, which the loop does not do")
    if whisper and gen.get("return_timestamps"):
        raise UnsupportedDecoding(f"{path} sets return_timestamps: the loop predicts no times")


def _token(gen: dict[str, Any], model: dict[str, Any], key: str, path: Path) -> int:
    value = gen.get(key)
    if value is None:
        value = model.get(key)
    if isinstance(value, list) and len(value) == 1:  # eos_token_id may be a list
        value = value[0]
    if isinstance(value, list):
        raise UnsupportedDecoding(f"{path}: {key} = {value}: the loop stops on one token only")
    if not isinstance(value, int) or isinstance(value, bool):
        raise PromptError(
            f"{path}: {key} = {value!r} (nor in {CONFIG}): set it to the token id, an integer"
        )
    return value


def _tokens(gen: dict[str, Any], key: str, path: Path) -> list[int]:
    value = gen.get(key) or []
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        raise PromptError(f"{path}: {key} = {value!r}: set a list of token ids")
    return list(value)


def _whisper_ids(gen: dict[str, Any], model: dict[str, Any], start: int, path: Path) -> list[int]:
    """`WhisperGenerationMixin._retrieve_init_tokens` for one language (transformers 4.57)."""
    task, language = gen.get("task"), gen.get("language")
    ids: list[int | None] = [start]
    if task is None and language is None:  # transformers ignores forced_decoder_ids otherwise
        ids += _forced_ids(gen, model, path)
    if isinstance(language, (list, tuple)):
        raise UnsupportedDecoding(f"{path}: language = {language}: one language per sample")
    if language is not None:
        lang = _language_id(gen, language, path)
        if len(ids) > 1:
            ids[1] = lang
        else:
            ids.append(lang)
    elif gen.get("lang_to_id") is not None and (len(ids) <= 1 or ids[1] is None):
        raise UnsupportedDecoding(
            f"{path} sets no language: generate detects it per clip, the loop does not; "
            "set generation_config.language"
        )
    task_to_id = gen.get("task_to_id")
    if task is not None:
        if task not in ("transcribe", "translate"):
            raise PromptError(f"{path}: task = {task!r}: use transcribe or translate")
        if not isinstance(task_to_id, dict):
            raise PromptError(f"{path}: task = {task!r} needs task_to_id with it")
        ids.append(_id_in(task_to_id, task, "task_to_id", path))
    elif (
        language is not None
        and isinstance(task_to_id, dict)
        and not any(t in ids for t in task_to_id.values())
    ):
        ids.append(_id_in(task_to_id, "transcribe", "task_to_id", path))
    no_timestamps = gen.get("no_timestamps_token_id")
    if no_timestamps is not None and ids[-1] != no_timestamps:
        ids.append(no_timestamps)
    return [t for t in ids if t is not None]


def _forced_ids(gen: dict[str, Any], model: dict[str, Any], path: Path) -> list[int | None]:
    """The tokens of forced_decoder_ids [[1, a], [2, b], ...] after the start token."""
    forced = gen.get("forced_decoder_ids")
    if forced is None:
        forced = model.get("forced_decoder_ids")
    if not forced or forced[0][0] != 1:  # transformers ignores them then
        return []
    out = []
    for i, pair in enumerate(forced, start=1):
        if pair[0] != i:
            raise PromptError(
                f"{path}: forced_decoder_ids = {forced} skips position {i}: list the tokens "
                "at positions 1, 2, ... (or set language and task instead)"
            )
        out.append(pair[1])
    return out


def _language_id(gen: dict[str, Any], language: str, path: Path) -> int:
    """`language` as transformers reads it: a lang_to_id key, a code or an English name."""
    lang_to_id = gen.get("lang_to_id")
    if not isinstance(language, str):
        raise PromptError(f"{path}: language = {language!r}: set a code such as 'fr'")
    if not isinstance(lang_to_id, dict):
        raise PromptError(f"{path}: language = {language!r} needs lang_to_id with it")
    name = language.lower()
    if name in lang_to_id:
        token = name
    elif f"<|{name}|>" in lang_to_id:  # a code ("fr"), found without transformers
        token = f"<|{name}|>"
    elif name in _language_codes():
        token = f"<|{_language_codes()[name]}|>"
    elif name in _language_codes().values():
        token = f"<|{name}|>"
    else:
        raise PromptError(
            f"{path}: language = {language!r} is no Whisper language: use a code such as 'fr' "
            "or a name such as 'french'"
        )
    return _id_in(lang_to_id, token, "lang_to_id", path)


def _language_codes() -> dict[str, str]:
    """transformers' Whisper language names -> codes ("french" -> "fr"): imported only for a
    generation config naming its language in English, which the inference path avoids."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    return TO_LANGUAGE_CODE


def _id_in(table: dict[str, Any], key: str, name: str, path: Path) -> int:
    value = table.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PromptError(f"{path}: {name} has no {key!r}: add it, or pick one of {list(table)}")
    return value
