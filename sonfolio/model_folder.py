"""What a saved model folder says, read without torch or transformers: its config.json as
attributes and its tokenizer (tokenizer.json through the `tokenizers` library).

The inference path (`sonfolio read` / `transcribe`, the service, the bench's ORT-loop rows) runs
exported ONNX models with numpy and onnxruntime alone: importing torch and transformers costs
~300 MB of resident memory and 2-4 s of start-up on 2 cores, more than whisper-base int8's
weights. transformers' tokenizer classes are thin wrappers over `tokenizers`; what ours adds is
what their `decode` does on top (Whisper's prompt strip and timestamp filter, the clean-up of
spaces where tokenizer_config.json asks for it), checked against them by
tests/test_model_folder.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_MAP = "special_tokens_map.json"
# transformers' special-token attributes (SpecialTokensMixin.SPECIAL_TOKENS_ATTRIBUTES)
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token")
_TIMESTAMP = re.compile(r"<\|(\d+\.\d+)\|>")  # Whisper's <|1.24|>: never in a plain transcript


class FolderError(ValueError):
    """A model folder's config or tokenizer that cannot be read; the message names the file."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`.

    Raises:
        FolderError: the file is missing, unreadable or not a JSON object.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise FolderError(f"{path} is missing: not a saved model folder") from err
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FolderError(f"{path} is unreadable ({err}): re-save the model") from err
    if not isinstance(data, dict):
        raise FolderError(f"{path} holds no JSON object: re-save the model")
    return data


def read_config(folder: Path) -> SimpleNamespace:
    """config.json as attributes (nested objects too: `config.decoder.n_positions`).

    Raises:
        FolderError: config.json is missing or unreadable.
    """
    data = read_json(Path(folder) / "config.json")
    return json.loads(json.dumps(data), object_hook=lambda d: SimpleNamespace(**d))


class FolderTokenizer:
    """A folder's tokenizer.json, decoding as transformers' fast tokenizer of the folder does
    (PreTrainedTokenizerFast, WhisperTokenizerFast): the methods the runtime uses, alone."""

    def __init__(self, folder: Path) -> None:
        """
        Raises:
            FolderError: tokenizer.json is missing or unreadable.
        """
        from tokenizers import Tokenizer

        folder = Path(folder)
        path = folder / TOKENIZER
        if not path.is_file():
            raise FolderError(
                f"{path} is missing: a variant folder needs the tokenizer saved beside the "
                "model (copy it from the FP32 model folder)"
            )
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises its own Exception subclass
            raise FolderError(f"{path} is unreadable ({err}): re-save the model") from err
        config = (
            read_json(folder / TOKENIZER_CONFIG) if (folder / TOKENIZER_CONFIG).is_file() else {}
        )
        if (folder / SPECIAL_MAP).is_file():
            config = {**read_json(folder / SPECIAL_MAP), **config}
        self.whisper = str(config.get("tokenizer_class", "")).startswith("Whisper")
        self.clean_up = bool(config.get("clean_up_tokenization_spaces", False))
        names = [_content(config.get(k)) for k in _SPECIAL_KEYS]
        names += [_content(t) for t in config.get("additional_special_tokens") or []]
        ids = [self._tok.token_to_id(n) for n in names if n]
        self.all_special_ids: list[int] = sorted({i for i in ids if i is not None})
        self.eos_token_id = self._id(_content(config.get("eos_token")))
        self.pad_token_id = self._id(_content(config.get("pad_token")))
        # Whisper: a previous-text prompt (<|startofprev|> ...) is dropped up to the start token
        self._prev = self._tok.token_to_id("<|startofprev|>") if self.whisper else None
        self._start = self._tok.token_to_id("<|startoftranscript|>") if self.whisper else None

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self._tok.token_to_id(token)

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self._tok.encode(text, add_special_tokens=add_special_tokens).ids}

    def decode(
        self,
        ids: Iterable[int],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens and self._prev is not None and ids and ids[0] == self._prev:
            ids = ids[ids.index(self._start) :] if self._start in ids else []
        text = self._tok.decode(ids, skip_special_tokens=skip_special_tokens)
        clean = (
            self.clean_up if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        if clean:
            text = _clean_up(text)
        return _TIMESTAMP.sub("", text) if self.whisper else text

    def batch_decode(
        self, rows: Sequence[Iterable[int]], skip_special_tokens: bool = False
    ) -> list[str]:
        return [self.decode(row, skip_special_tokens) for row in rows]


def _content(token: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(token, dict):
        return token.get("content")
    return token if isinstance(token, str) else None


def _clean_up(text: str) -> str:
    """transformers' `clean_up_tokenization` (spaces before punctuation and English clitics)."""
    for old, new in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(old, new)
    return text
