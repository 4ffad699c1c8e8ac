"""A CTranslate2 (faster-whisper) folder read back into transformers' Whisper: the real
whisper-base installed from PyPI decodes to CTranslate2's own tokens, and a folder that is not a
complete Whisper fails before any training, naming the file and the fix."""

from __future__ import annotations

import importlib.resources
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from whisper_tiny import PACKAGE, save

from sonfolio.io import file_sha256
from sonfolio.speech.model import bases
from sonfolio.speech.model.ct2_import import Ct2FolderError, import_folder

FRENCH = "Le petit chat dort sur le canapé depuis ce matin."
PROMPT = ["<|startoftranscript|>", "<|fr|>", "<|transcribe|>", "<|notimestamps|>"]


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_base = pytest.mark.skipif(
    not _installed(PACKAGE), reason=f"whisper-base ({PACKAGE}, a project dependency) absent"
)


def _clip_features(folder: Path) -> np.ndarray:
    """An espeak-ng French sentence as the folder's feature extractor sees it: (1, mels, frames)."""
    from transformers import WhisperFeatureExtractor

    from sonfolio.speech.common.audio import resample
    from sonfolio.speech.data.espeak import synthesize

    pcm, rate = synthesize(FRENCH, "m3", 150, 50)
    audio = resample(pcm.astype(np.float32) / 32768.0, rate)
    fe = WhisperFeatureExtractor.from_pretrained(str(folder))
    return fe(audio, sampling_rate=16000, return_tensors="np").input_features


def _greedy_transformers(folder: Path, features: np.ndarray, prompt: list[int], n: int) -> list:
    """Plain greedy decoding (no logits processors: the CTranslate2 side runs with no
    suppression either), so both sides take the argmax of the same model."""
    import torch
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(str(folder)).eval()
    eot = model.generation_config.eos_token_id
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        enc = model.model.encoder(torch.from_numpy(features)).last_hidden_state
        for _ in range(n):
            logits = model(encoder_outputs=(enc,), decoder_input_ids=ids).logits[0, -1]
            nxt = int(logits.argmax())
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
            if nxt == eot:
                break
    return ids[0, len(prompt) :].tolist()


def _greedy_ct2(ct2: Path, features: np.ndarray, prompt: list[int], n: int) -> list:
    import ctranslate2

    model = ctranslate2.models.Whisper(str(ct2), device="cpu", compute_type="float32")
    res = model.generate(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(features, dtype=np.float32)),
        [prompt],
        beam_size=1,
        # CTranslate2 stops at about min(max_length - prompt, max_length // 2) new tokens
        max_length=2 * (len(prompt) + n),
        suppress_blank=False,
        suppress_tokens=[],
        return_scores=False,
    )
    return list(res[0].sequences_ids[0])[:n]


def _compare(ct2: Path, hf: Path, n: int) -> tuple[list, list]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(hf))
    prompt = tok.convert_tokens_to_ids(PROMPT)
    features = _clip_features(hf)
    theirs = _greedy_ct2(ct2, features, prompt, n)
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    ours = [t for t in _greedy_transformers(hf, features, prompt, n) if t != eot]
    return ours, theirs


@needs_base
@pytest.mark.slow
def test_whisper_base_import_decodes_the_tokens_ctranslate2_float32_decodes(tmp_path):
    """The installed whisper-base, imported, and CTranslate2 float32 on the very same folder:
    identical greedy tokens on a French clip, and a generation config for French transcription."""
    from transformers import AutoTokenizer, GenerationConfig

    hf = Path(bases.resolve("package:whisper-base", "fr", cache=tmp_path))
    ct2 = tmp_path / "ct2-whisper-base"
    ours, theirs = _compare(ct2, hf, 40)
    assert len(theirs) >= 5, theirs
    assert ours == theirs
    text = AutoTokenizer.from_pretrained(str(hf)).decode(ours, skip_special_tokens=True)
    assert any(c.isalpha() for c in text), text  # real words, not only punctuation
    gen = GenerationConfig.from_pretrained(str(hf))
    assert (gen.language, gen.task, gen.return_timestamps) == ("fr", "transcribe", False)
    ct2_config = json.loads((ct2 / "config.json").read_text())
    assert gen.suppress_tokens == ct2_config["suppress_ids"]
    # a second resolve reuses the cached import (same folder, not rebuilt)
    mtime = (hf / "model.safetensors").stat().st_mtime_ns
    assert bases.resolve("package:whisper-base", "fr", cache=tmp_path) == str(hf)
    assert (hf / "model.safetensors").stat().st_mtime_ns == mtime


@pytest.fixture(scope="module")
def tiny_ct2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Whisper with Whisper's tokenizer, converted to a CTranslate2 float32 folder
    by ctranslate2's own converter (the layout faster-whisper loads)."""
    if not _installed(PACKAGE):
        pytest.skip(f"Whisper's tokenizer comes from {PACKAGE}, absent")
    root = tmp_path_factory.mktemp("tiny_ct2")
    save(root / "hf", layers=2, window_s=30)
    converter = Path(sys.executable).with_name("ct2-transformers-converter")
    cmd = [str(converter), "--model", str(root / "hf"), "--output_dir", str(root / "ct2")]
    subprocess.run([*cmd, "--copy_files", "tokenizer.json"], check=True, capture_output=True)
    return root / "ct2"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_ct2_folder_converted_by_ctranslate2_imports_with_its_tokens(tiny_ct2, tmp_path):
    """A folder as ctranslate2 4.x's converter writes it (with the alibi flags it adds) imports,
    and decodes the tokens CTranslate2 float32 decodes; its suppress lists carry over."""
    hf = Path(bases.resolve(str(tiny_ct2), "fr", cache=tmp_path / "cache"))
    ours, theirs = _compare(tiny_ct2, hf, 12)
    assert ours == theirs and len(theirs) >= 1
    gen = json.loads((hf / "generation_config.json").read_text())
    assert gen["suppress_tokens"] == [1, 2, 7]
    assert gen["lang_to_id"]["<|fr|>"] == 50265


def test_a_ct2_folder_without_model_bin_names_it(tiny_ct2, tmp_path):
    folder = _copy(tiny_ct2, tmp_path / "base")
    (folder / "model.bin").unlink()
    with pytest.raises(bases.BaseModelError, match=r"model\.bin is missing.*config\.json"):
        bases.resolve(str(folder), "fr", cache=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("hf-*")), "no half import left behind"


def test_a_truncated_model_bin_names_the_file_and_the_fix(tiny_ct2, tmp_path):
    folder = _copy(tiny_ct2, tmp_path / "base")
    data = (folder / "model.bin").read_bytes()
    (folder / "model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(bases.BaseModelError) as err:
        bases.resolve(str(folder), "fr", cache=tmp_path / "cache")
    assert str(folder / "model.bin") in str(err.value)
    assert "truncated" in str(err.value) and "re-copy" in str(err.value)


def test_an_unknown_variable_is_named(tiny_ct2, tmp_path):
    """A renamed variable (same length, so the file stays well formed) is refused by name,
    not imported as a model with one tensor missing."""
    folder = _copy(tiny_ct2, tmp_path / "base")
    data = (folder / "model.bin").read_bytes()
    assert data.count(b"decoder/alibi\x00") == 1
    (folder / "model.bin").write_bytes(data.replace(b"decoder/alibi\x00", b"decoder/xyzzy\x00"))
    with pytest.raises(bases.BaseModelError, match=r"unknown variable\(s\) decoder/xyzzy"):
        bases.resolve(str(folder), "fr", cache=tmp_path / "cache")


def test_a_model_of_another_architecture_under_whisper_names_is_refused(tiny_ct2, tmp_path):
    from sonfolio.speech.model.ct2_import import read_model_bin, state_dict

    _, variables = read_model_bin(tiny_ct2 / "model.bin")
    variables["decoder/pre_norm"] = np.array(0, dtype=np.int8)
    with pytest.raises(Ct2FolderError, match=r"decoder/pre_norm = 0, Whisper's is 1"):
        state_dict(variables, tiny_ct2 / "model.bin")


def test_a_tokenizer_without_whisper_tokens_is_refused(tiny_ct2, tmp_path):
    folder = _copy(tiny_ct2, tmp_path / "base")
    tj = json.loads((folder / "tokenizer.json").read_text())
    tj["added_tokens"] = [t for t in tj["added_tokens"] if t["content"] != "<|notimestamps|>"]
    tj["model"]["vocab"].pop("<|notimestamps|>", None)
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(Ct2FolderError, match=r"tokenizer\.json: <\|notimestamps\|> is not"):
        import_folder(folder, tmp_path / "out")


def _fake_package(root: Path, module: str, files: dict[str, bytes]) -> None:
    pkg = root / module
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for rel, data in files.items():
        (pkg / rel).write_bytes(data)


@pytest.fixture
def packaged_tiny(tiny_ct2, tmp_path, monkeypatch) -> bases.Packaged:
    """The tiny folder shipped the way whisper-base is on PyPI: model.bin split across two
    installed packages, pinned by sha256."""
    blob = (tiny_ct2 / "model.bin").read_bytes()
    half = len(blob) // 2
    site = tmp_path / "site"
    _fake_package(
        site,
        "tiny_part1",
        {
            "data/model.bin.part1": blob[:half],
            "data/config.json": (tiny_ct2 / "config.json").read_bytes(),
            "data/tokenizer.json": (tiny_ct2 / "tokenizer.json").read_bytes(),
        },
    )
    _fake_package(site, "tiny_part2", {"data/model.bin.part2": blob[half:]})
    monkeypatch.syspath_prepend(str(site))
    spec = bases.Packaged(
        pip="tiny-part1==1.0 tiny-part2==1.0",
        parts=(("tiny_part1", "data/model.bin.part1"), ("tiny_part2", "data/model.bin.part2")),
        files=(
            ("tiny_part1", "data/config.json", "config.json"),
            ("tiny_part1", "data/tokenizer.json", "tokenizer.json"),
        ),
        sha256={f: file_sha256(tiny_ct2 / f) for f in ("model.bin", "config.json")},
    )
    monkeypatch.setitem(bases.PACKAGED, "tiny", spec)
    return spec


def test_a_packaged_base_is_joined_checked_and_imported(packaged_tiny, tmp_path):
    hf = Path(bases.resolve("package:tiny", "fr", cache=tmp_path / "cache"))
    assert (hf / "model.safetensors").is_file()
    assert bases.ct2_folder("package:tiny", cache=tmp_path / "cache") == (
        tmp_path / "cache" / "ct2-tiny"
    )


def test_a_packaged_base_with_a_wrong_sha256_fails_naming_the_file_and_the_fix(
    packaged_tiny, tmp_path
):
    part2 = tmp_path / "site" / "tiny_part2" / "data" / "model.bin.part2"
    data = bytearray(part2.read_bytes())
    data[-100] ^= 0xFF  # one flipped byte in a weight: the file still parses
    part2.write_bytes(bytes(data))
    with pytest.raises(bases.BaseModelError) as err:
        bases.resolve("package:tiny", "fr", cache=tmp_path / "cache")
    msg = str(err.value)
    assert "model.bin" in msg and "not the pinned" in msg
    assert "pip install --force-reinstall tiny-part1==1.0 tiny-part2==1.0" in msg
    assert not (tmp_path / "cache" / "ct2-tiny").exists(), "a bad assembly is not kept"


def test_a_packaged_base_whose_package_is_absent_says_what_to_install(tmp_path, monkeypatch):
    spec = bases.Packaged(
        pip="not-installed-part1==1.0",
        parts=(("not_installed_part1", "data/model.bin"),),
        files=(),
        sha256={},
    )
    monkeypatch.setitem(bases.PACKAGED, "missing", spec)
    with pytest.raises(bases.BaseModelError, match=r"pip install not-installed-part1==1\.0"):
        bases.resolve("package:missing", "fr", cache=tmp_path / "cache")
    with pytest.raises(bases.BaseModelError, match=r"known: .*package:whisper-base"):
        bases.resolve("package:nope", "fr", cache=tmp_path / "cache")
