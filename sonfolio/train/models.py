"""What both tracks' model builders do alike: size check, checkpoint loading, special tokens.

A GPU size is refused on a CPU before any work; a checkpoint is loaded from the hub or a folder
with an error that names the setting; the decoder gets the tokenizer's special tokens.
"""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sonfolio.train.device import Backend, DeviceCannotDo


def check_size(stage: str, size: str, gpu_only: bool, backend: Backend) -> None:
    """Raises DeviceCannotDo for a size preset made for a GPU (`gpu_only`) on a CPU."""
    if gpu_only and not backend.is_gpu:
        raise DeviceCannotDo(
            f"{stage}.model.size = {size} is a GPU size: on this CPU one step would take "
            f"minutes. Set {stage}.model.size: tiny (or `dvc exp run -S {stage}.model.size=tiny`),"
            " or run on a GPU"
        )


def load(cls: type[PreTrainedModel], name: str, key: str, what: str) -> PreTrainedModel:
    """`cls.from_pretrained(name)` with SDPA attention; `key` is the setting that names it
    (<stage>.model.<setting>), `what` the kind of model it must hold.

    Raises:
        ValueError: it cannot be loaded (the message says what to configure).
    """
    try:
        return cls.from_pretrained(name, attn_implementation="sdpa")
    except (OSError, ValueError) as err:
        stage = key.split(".")[0]
        raise ValueError(
            f"{key} = {name!r} could not be loaded: {err}\nSet it to a local folder holding "
            f"{what} (`hf download NAME --local-dir DIR`), or null to build one from "
            f"{stage}.model.size"
        ) from err


def special_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """The decoder's start, begin, end and padding token ids: the tokenizer's <s>, </s>, pad."""
    return {
        "decoder_start_token_id": tokenizer.bos_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
