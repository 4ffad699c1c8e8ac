"""Byte-level BPE tokenizers trained with `tokenizers`, saved for transformers.

Shared by both tracks. Pre-tokenization splits only at spaces (a space joins the token after
it), so merges can span a whole symbol such as `fis''4.` but never two; byte-level pieces with
the full 256-byte initial alphabet mean any text encodes without <unk> and decodes back exactly.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]


@dataclass(frozen=True)
class BuiltTokenizer:
    """A track's tokenizer as its tokenizer face made (or took) it, for the tokenizer step to check
    and save."""

    tokenizer: PreTrainedTokenizerFast  # what every manifest text is round-tripped through
    parts: tuple[Any, ...]  # saved with save_pretrained into one folder (tokenizer, features)
    exact: bool  # a round-trip failure is an error (trained here), or only logged (a base's)
    stats: dict[str, Any]  # what the track adds to the step's metrics (vocab_size, ...)


def train_bpe(
    texts: Sequence[str], vocab_size: int, min_frequency: int, model_max_length: int
) -> PreTrainedTokenizerFast:
    """Train a BPE on `texts`; encodings get <s> ... </s> around them."""
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(" ", behavior="merged_with_next"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A {EOS}", special_tokens=[(BOS, bos), (EOS, eos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def round_trip_failures(tok: PreTrainedTokenizerFast, texts: Sequence[str]) -> list[str]:
    """Texts that do not decode back to themselves exactly (should be none)."""
    ids = tok(list(texts), add_special_tokens=True)["input_ids"]
    decoded = tok.batch_decode(ids, skip_special_tokens=True)
    return [t for t, d in zip(texts, decoded, strict=True) if t != d]


def length_stats(tok: PreTrainedTokenizerFast, texts: Sequence[str]) -> dict[str, float]:
    """Tokens per text (with <s> and </s>) and characters per token."""
    lengths = sorted(len(x) for x in tok(list(texts))["input_ids"]) or [0]
    return {
        "tokens_mean": round(statistics.fmean(lengths), 2),
        "tokens_p95": lengths[int(0.95 * (len(lengths) - 1))],
        "tokens_max": lengths[-1],
        "chars_per_token": round(sum(map(len, texts)) / max(1, sum(lengths)), 3),
        "over_max_length": sum(n > tok.model_max_length for n in lengths),
    }
