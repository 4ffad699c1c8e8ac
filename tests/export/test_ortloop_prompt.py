"""The ORT greedy loop decodes a hub-style Whisper as transformers does: the multi-token
prompt <|startoftranscript|><|fr|><|transcribe|><|notimestamps|>, suppress_tokens at every
step and begin_suppress_tokens at the first generated one (sonfolio.prompt, OrtGreedy).

The model is a tiny random Whisper whose generation config carries a hub Whisper's keys
(tests/export/hub_whisper.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from export.hub_whisper import (  # tests/ is on sys.path
    BEGIN_SUPPRESS,
    EOS,
    PAD,
    PROMPT,
    START,
    SUPPRESS,
)

from sonfolio import prompt
from sonfolio.prompt import DecoderPrompt

NEW = 12


def features(batch: int, seed: int) -> np.ndarray:
    """(B, mel bins, frames): a spectrum per sample, so samples differ after cross-attention's
    averaging over time (white noise alone gives every sample the same tokens)."""
    g = torch.Generator().manual_seed(seed)
    x = 2 * torch.randn(batch, 80, 1, generator=g) + 0.1 * torch.randn(batch, 80, 100, generator=g)
    return x.numpy()


def hf_tokens(folder: Path, x: np.ndarray, **kw) -> list[list[int]]:
    """transformers' greedy generate, each sample cut at its end token: Whisper's generate
    drops the end token, and pads the batch with pad_token_id (which this model never
    generates: its embedding row is zero); the loop pads with the end token."""
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(str(folder)).eval()
    with torch.inference_mode():
        out = model.generate(
            torch.from_numpy(x), do_sample=False, num_beams=1, max_new_tokens=NEW, **kw
        )
    return [upto_eos(unpadded(s)) for s in out.tolist()]


def unpadded(tokens: list[int]) -> list[int]:
    while tokens and tokens[-1] == PAD:
        tokens = tokens[:-1]
    return tokens


def upto_eos(tokens: list[int]) -> list[int]:
    return tokens[: tokens.index(EOS)] if EOS in tokens else tokens


def loop(folder: Path, decoder_prompt: DecoderPrompt) -> object:
    from sonfolio.infer.ortloop import OrtGreedy

    return OrtGreedy(folder, 1, 1, False, decoder_prompt)


def test_read_gives_whispers_four_token_prompt_and_suppression(hub_whisper):
    assert prompt.read(hub_whisper) == DecoderPrompt(PROMPT, EOS, SUPPRESS, BEGIN_SUPPRESS)


def test_the_loop_gives_transformers_tokens_for_a_hub_whisper(hub_whisper, hub_whisper_onnx):
    greedy = loop(hub_whisper_onnx, prompt.read(hub_whisper_onnx))
    assert greedy.prompt.ids == PROMPT
    got_any, ended = set(), 0
    for batch, seed in ((1, 1), (1, 2), (1, 3), (8, 4)):
        x = features(batch, seed)
        raw = greedy.generate(x, NEW, forced=False)
        got = [upto_eos(s) for s in raw]
        assert got == hf_tokens(hub_whisper, x), (batch, seed)
        got_any |= {t for s in got for t in s}
        ended += sum(EOS in s for s in raw)
    assert not got_any & set(SUPPRESS) and ended  # some samples end early
    # forced (the bench's fixed length): never the end token, HF's min_new_tokens
    x = features(3, 5)
    got = greedy.generate(x, NEW, forced=True)
    assert got == hf_tokens(hub_whisper, x, min_new_tokens=NEW)
    assert all(len(s) == NEW and EOS not in s for s in got)


def test_one_decoder_session_runs_every_step_with_transformers_tokens(
    hub_whisper, hub_whisper_onnx, tmp_path, monkeypatch
):
    """The loop holds the decoder's weights once: at batch 1 it opens the encoder and one
    decoder session (the export's fused file, or the same graph built from the merged decoder
    where the file is missing), and both give transformers' greedy tokens."""
    from sonfolio.export.decoder_step import write_fused
    from sonfolio.export.layout import DECODER_FUSED, ENCODER
    from sonfolio.infer import ortloop

    stored = shutil.copytree(hub_whisper_onnx, tmp_path / "stored")
    write_fused(stored)
    opened: list[str | bytes] = []
    real = ortloop.session
    monkeypatch.setattr(
        ortloop, "session", lambda model, *a, **k: opened.append(model) or real(model, *a, **k)
    )
    for folder in (stored, hub_whisper_onnx):
        opened.clear()
        greedy = loop(folder, prompt.read(folder))
        for seed in (1, 2):
            x = features(1, seed)
            got = [upto_eos(s) for s in greedy.generate(x, NEW, forced=False)]
            assert got == hf_tokens(hub_whisper, x), (folder.name, seed)
        # the decoder opened first (its opening's peak before the encoder is resident)
        assert len(opened) == 2 and opened[1] == str(folder / ENCODER)
        if folder == stored:  # the export's file as it is
            assert opened[0] == str(stored / DECODER_FUSED)
        else:  # built from the merged decoder, handed to ORT as bytes
            assert isinstance(opened[0], bytes)


def test_suppression_and_the_whole_prompt_change_the_tokens(hub_whisper, hub_whisper_onnx):
    """The checks above would catch a loop that ignored suppression or fed one start token."""
    x = features(8, 4)
    free = hf_tokens(hub_whisper, x, suppress_tokens=[], begin_suppress_tokens=[])
    assert {s[0] for s in free} & set(BEGIN_SUPPRESS)
    assert {t for s in free for t in s} & set(SUPPRESS)
    unsuppressed = loop(hub_whisper_onnx, DecoderPrompt(PROMPT, EOS, [], []))
    assert [upto_eos(s) for s in unsuppressed.generate(x, NEW, forced=False)] == free
    expected = hf_tokens(hub_whisper, x)
    one_start = loop(hub_whisper_onnx, DecoderPrompt([START], EOS, SUPPRESS, BEGIN_SUPPRESS))
    assert [upto_eos(s) for s in one_start.generate(x, NEW, forced=False)] != expected


def test_variants_decode_a_hub_whisper_with_the_loop_unless_it_asks_for_timestamps(
    hub_whisper_onnx, tmp_path
):
    from sonfolio import variants

    assert variants._greedy_loop(hub_whisper_onnx, "CPUExecutionProvider", 1).prompt.ids == PROMPT
    folder = shutil.copytree(hub_whisper_onnx, tmp_path / "timestamps")
    edit_generation(folder, return_timestamps=True)
    assert variants._greedy_loop(folder, "CPUExecutionProvider", 1) is None
    edit_generation(folder, return_timestamps=False, language="klingon")
    with pytest.raises(variants.VariantError, match="language"):
        variants._greedy_loop(folder, "CPUExecutionProvider", 1)


def edit_generation(folder: Path, **changes) -> None:
    """Set (or, with None, drop) keys of the folder's generation_config.json."""
    path = folder / prompt.GENERATION
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


@pytest.mark.parametrize(
    "changes",
    [
        {"language": "<|fr|>"},
        {"language": "French"},
        {"language": "en", "task": "translate"},
        {"task": None},  # a language alone: transcribe
        {"language": None, "task": None, "forced_decoder_ids": [[1, 110], [2, 112]]},
        {"language": None, "task": None, "forced_decoder_ids": [[1, 111], [2, 113], [3, 114]]},
        {"no_timestamps_token_id": None},
        {"language": None, "task": None, "lang_to_id": None, "no_timestamps_token_id": None},
    ],
)
def test_the_prompt_is_transformers_init_tokens(hub_whisper, tmp_path, changes):
    """sonfolio.prompt mirrors WhisperGenerationMixin._retrieve_init_tokens (4.57) on the
    generation config keys a hub Whisper saves."""
    from transformers import GenerationConfig, WhisperForConditionalGeneration

    folder = shutil.copytree(hub_whisper, tmp_path / "model")
    edit_generation(folder, **changes)
    model = WhisperForConditionalGeneration.from_pretrained(str(folder))
    gen = GenerationConfig.from_pretrained(str(folder))
    gen.return_timestamps = getattr(gen, "return_timestamps", None)  # as generate sets it
    x = torch.from_numpy(features(1, 0))
    expected = model._retrieve_init_tokens(x, 1, gen, model.config, 100, {})[0].tolist()
    assert prompt.read(folder).ids == expected


def test_a_plain_generation_config_gives_the_start_token_alone(tmp_path):
    """The project's from-scratch models: no prompt beyond the start token, nothing
    suppressed, whatever the model type."""
    plain = {"decoder_start_token_id": 1, "bos_token_id": 1, "eos_token_id": 2}
    for model_type in ("whisper", "vision-encoder-decoder"):
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / prompt.CONFIG).write_text(json.dumps({"model_type": model_type}))
        (folder / prompt.GENERATION).write_text(
            json.dumps({**plain, "pad_token_id": 0, "transformers_version": "4.57.6"})
        )
        assert prompt.read(folder) == DecoderPrompt([1], 2, [], [])


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"language": "klingon"}, prompt.PromptError, "language = 'klingon'"),
        ({"language": "de"}, prompt.PromptError, "lang_to_id has no '<|de|>'"),
        ({"task": "summarise"}, prompt.PromptError, "task = 'summarise'"),
        ({"decoder_start_token_id": "x"}, prompt.PromptError, "decoder_start_token_id"),
        ({"return_timestamps": True}, prompt.UnsupportedDecoding, "return_timestamps"),
        ({"language": None}, prompt.UnsupportedDecoding, "detects it"),
        ({"repetition_penalty": 1.2}, prompt.UnsupportedDecoding, "repetition_penalty"),
    ],
)
def test_a_config_the_loop_cannot_follow_is_named(hub_whisper, tmp_path, changes, error, match):
    folder = tmp_path / "model"
    folder.mkdir()
    for name in (prompt.CONFIG, prompt.GENERATION):
        shutil.copy(hub_whisper / name, folder / name)
    edit_generation(folder, **changes)
    with pytest.raises(error, match=re.escape(match)) as info:
        prompt.read(folder)
    assert prompt.GENERATION in str(info.value)


def test_the_written_out_generation_defaults_are_transformers_own():
    # prompt.py reads a generation config without transformers; its table of defaults must
    # stay what GenerationConfig() holds, or a key set to its default would be refused (or a
    # changed default let through)
    from transformers import GenerationConfig

    theirs = {
        k: v
        for k, v in GenerationConfig().to_dict().items()
        if v is not None and k != "transformers_version"
    }
    assert theirs == prompt.GENERATION_DEFAULTS


def test_reading_a_prompt_imports_no_transformers(hub_whisper):
    import subprocess
    import sys

    code = (
        "import sys; from sonfolio import prompt; "
        f"p = prompt.read({str(hub_whisper)!r}); print(p.ids); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ids, heavy = out.stdout.splitlines()[-2:]
    assert ids == str(prompt.read(hub_whisper).ids)
    assert heavy == "[]"
