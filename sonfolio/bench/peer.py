"""The peer engine measured beside a track's variants: CTranslate2's Whisper, made and run.

CTranslate2 is faster-whisper's engine; the speech track asks for it (its `bench_peers`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sonfolio.bench.case import Case, Spec


def convert_ct2(model_dir: Path, out: Path) -> list[int]:
    """The HF Whisper as CTranslate2 int8, with the special-token names CT2 looks up; returns
    the decoder prompt to give it.

    CTranslate2 finds Whisper's start, end and no-timestamps tokens by their OpenAI names
    (<|startoftranscript|>, <|endoftext|>, <|notimestamps|>); unless <|notimestamps|> ends the
    prompt it applies timestamp rules that forbid every text token at the first step. Our
    tokenizer names them <s> and </s> and has no no-timestamps token, so the converted
    vocabulary renames the start and end ids and names the last id (a rare BPE merge)
    <|notimestamps|>: the prompt is [start, last id], one token longer than HF's [start].
    Checked: with that same prompt, CT2 float32 and HF generate give identical tokens.
    """
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoTokenizer

    TransformersConverter(str(model_dir)).convert(str(out), quantization="int8", force=True)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    vocab_path = out / "vocabulary.json"
    vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    vocab[tok.bos_token_id] = "<|startoftranscript|>"
    vocab[tok.eos_token_id] = "<|endoftext|>"
    vocab[-1] = "<|notimestamps|>"
    vocab_path.write_text(json.dumps(vocab), encoding="utf-8")
    return [tok.bos_token_id, len(vocab) - 1]


PEERS = ("ct2_int8",)  # the engines a track's definition may ask for (its bench_peers)


def peer_case(name: str, model_dir: Path, workdir: Path) -> tuple[Case, list[int]]:
    """A peer engine measured beside the variants, made from the FP32 model under `workdir`,
    and the decoder prompt it needs (every runtime then gets that prompt, so outputs compare).

    `ct2_int8`: CTranslate2's Whisper in int8, faster-whisper's engine (convert_ct2).

    Raises:
        ValueError: `name` is not one of PEERS.
    """
    if name not in PEERS:
        raise ValueError(f"bench peer {name!r} (a track's bench_peers): known peers are {PEERS}")
    folder = workdir / "ct2"
    prompt = convert_ct2(model_dir, folder)
    return Case(name, "ct2", str(folder)), prompt


class Ct2Runtime:
    """CTranslate2's Whisper (faster-whisper's engine); prompt from convert_ct2."""

    def __init__(self, spec: Spec) -> None:
        import ctranslate2

        self.ct2 = ctranslate2
        self.model = ctranslate2.models.Whisper(
            spec.case.folder,
            device="cpu",
            compute_type="int8",
            intra_threads=spec.threads,
            inter_threads=1,
        )
        self.prompt = spec.prompt
        self.eos = spec.eos_id

    def encode(self, x: np.ndarray) -> None:
        self.model.encode(self.ct2.StorageView.from_array(np.ascontiguousarray(x)))

    def generate(self, x: np.ndarray, new: int, forced: bool) -> list[list[int]]:
        # CT2 decodes min(max_length // 2, max_length - prompt) new tokens at most.
        out = self.model.generate(
            self.ct2.StorageView.from_array(np.ascontiguousarray(x)),
            [self.prompt] * len(x),
            max_length=2 * new,
            beam_size=1,
            suppress_blank=False,
            suppress_tokens=[self.eos] if forced else [],
        )
        return [r.sequences_ids[0] for r in out]
