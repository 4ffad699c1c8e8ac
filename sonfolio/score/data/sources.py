"""Where the music comes from: music21's shipped corpus, a user's folder, or an archive.

A *unit* is one piece to parse: a file, or one tune of an ABC file that holds many (the folk
collections keep hundreds of tunes per file; splitting them lets pieces be sampled and parsed
in parallel instead of parsing whole files).

Hostile or careless input (docs/security.md): archives are unpacked by
sonfolio.score.data.archives (no links, nothing outside the cache, capped size, count and ratio);
a file name that is not UTF-8 is kept as the path to open, and shown escaped (`caf\\xe9.xml`)
in piece ids, logs and the manifest; a file over score_data.limits.max_file_mb is never read
here (its unit is skipped as too_large when parsed).
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sonfolio.io import file_sha256
from sonfolio.score.data.archives import UnsafeArchive, source_caps, unpack_into
from sonfolio.score.data.parse import abc_tunes, too_large

if TYPE_CHECKING:
    from sonfolio.config.data import ScoreLimits, ScoreSource

log = logging.getLogger(__name__)

_DOWNLOAD_TRIES = 4

# What a folder or archive source is searched for: MusicXML, kern and ABC files.
SCORE_EXTENSIONS = (".xml", ".musicxml", ".mxl", ".krn", ".abc")


class SourceConfigError(ValueError):
    """A configured source cannot be used; the message says what to change."""


@dataclass(frozen=True)
class Unit:
    collection: str
    piece: str  # stable id, unique across collections: "<collection>/<relative path>[#<tune>]"
    path: Path
    tune: int | None = None  # index of the tune in a multi-tune ABC file


def display_name(path: Path | str) -> str:
    """A path as text that can be written anywhere (UTF-8 JSON, logs): bytes of a name that
    are not UTF-8 (kept by Python as surrogates) shown as `\\xe9` escapes."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def _units_in_file(
    collection: str, root: Path, path: Path, limits: ScoreLimits | None = None
) -> list[Unit]:
    rel = display_name(path.relative_to(root).as_posix())
    if limits is not None and too_large(path, limits):  # never read: skipped when parsed
        return [Unit(collection, f"{collection}/{rel}", path)]
    if path.suffix.lower() == ".abc":
        tunes = abc_tunes(path.read_text(encoding="utf-8", errors="replace"))
        if len(tunes) > 1:
            return [
                Unit(collection, f"{collection}/{rel}#{name}", path, i)
                for i, (name, _) in enumerate(tunes)
            ]
    return [Unit(collection, f"{collection}/{rel}", path)]


def _files_under(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SCORE_EXTENSIONS
    )


def music21_corpus_root() -> Path:
    from music21 import common

    return Path(common.getCorpusFilePath())


def source_root(source: ScoreSource, download_cache: Path, limits: ScoreLimits) -> Path:
    """The folder holding a source's files (downloading and unpacking an archive if needed)."""
    if source.music21 is not None:
        root = music21_corpus_root() / source.music21
        if not root.is_dir():
            known = sorted(p.name for p in music21_corpus_root().iterdir() if p.is_dir())
            raise SourceConfigError(
                f"score_data.sources[{source.name}].music21 = {source.music21!r} is not a "
                f"music21 corpus folder; known: {', '.join(k for k in known if k[0] != '_')}"
            )
        return root
    if source.folder is not None:
        if not source.folder.is_dir():
            raise SourceConfigError(
                f"score_data.sources[{source.name}].folder = {str(source.folder)!r} is not a "
                "folder: point it at a folder of .xml/.mxl/.krn/.abc files"
            )
        return source.folder
    assert source.archive is not None and source.sha256 is not None  # checked by the config
    cached = fetch(source.archive, source.sha256, download_cache)
    try:
        return unpack(cached, download_cache, limits)
    except SourceConfigError as err:  # the message names the cached copy: name the source too
        raise SourceConfigError(
            f"score_data.sources[{source.name}].archive = {source.archive!r} is refused: {err}"
        ) from err


def list_units(
    source: ScoreSource, download_cache: Path, seed: int, limits: ScoreLimits
) -> list[Unit]:
    """Every piece of a source, or `max_pieces` of them sampled with `seed`, in a stable order."""
    root = source_root(source, download_cache, limits)
    units = [u for f in _files_under(root) for u in _units_in_file(source.name, root, f, limits)]
    if not units:
        raise SourceConfigError(
            f"score_data.sources[{source.name}] ({root}) holds no {'/'.join(SCORE_EXTENSIONS)} file"
        )
    if source.max_pieces is not None and source.max_pieces < len(units):
        units = sorted(
            random.Random(f"{seed}/{source.name}").sample(units, source.max_pieces),
            key=lambda u: u.piece,
        )
    return units


def _download(url: str, dest: Path) -> None:
    """Download with retries and backoff: network I/O is the one place retries belong."""
    for attempt in range(1, _DOWNLOAD_TRIES + 1):
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, dest.open("wb") as out:
                shutil.copyfileobj(resp, out)
            return
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            if attempt == _DOWNLOAD_TRIES:
                raise SourceConfigError(
                    f"could not download {url} after {attempt} tries ({err}); check the URL and "
                    "the network, or download it yourself and set `archive:` to the local path"
                ) from err
            wait = 2**attempt
            log.warning("download of %s failed (%s); retrying in %d s", url, err, wait)
            time.sleep(wait)


def fetch(archive: str, sha256: str, cache: Path) -> Path:
    """Return a verified local copy of `archive` (a path, file:// or http(s) URL), cached by hash.

    Raises:
        SourceConfigError: the file is missing, the download failed, or the checksum differs.
    """
    suffix = "".join(Path(archive.split("?")[0]).suffixes[-2:]) or ".zip"
    cached = cache / f"{sha256}{suffix}"
    if cached.is_file() and file_sha256(cached) == sha256:
        return cached
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache, suffix=".part", delete=False) as tmp:
        part = Path(tmp.name)
    try:
        if re.match(r"^(https?|ftp|file)://", archive):
            log.info("downloading %s", archive)
            _download(archive, part)
        elif Path(archive).is_file():
            shutil.copyfile(archive, part)
        else:
            raise SourceConfigError(f"archive {archive!r} is neither a file nor a URL")
        actual = file_sha256(part)
        if actual != sha256:
            raise SourceConfigError(
                f"archive {archive} has sha256 {actual}, but params.yaml expects {sha256}: the "
                "file changed or the download is incomplete; if the new file is right, put its "
                "sha256 in params.yaml"
            )
        part.replace(cached)
    finally:
        part.unlink(missing_ok=True)
    return cached


def unpack(archive: Path, cache: Path, limits: ScoreLimits) -> Path:
    """Unpack once into `<cache>/<name>.d`; a half-unpacked folder is never left in place.

    Raises:
        SourceConfigError: the archive is damaged, holds a link, device or path out of the
            cache, or passes a cap of score_data.limits (the message names the param).
    """
    dest = cache / f"{archive.name}.d"
    if dest.is_dir():
        return dest
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".unpack-"))
    try:
        unpack_into(archive, tmp, source_caps(limits))
        tmp.replace(dest)
    except UnsafeArchive as err:
        raise SourceConfigError(str(err)) from err
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, RuntimeError) as err:
        # RuntimeError: zipfile's "encrypted, password required"; EOFError: a cut-off stream
        raise SourceConfigError(f"cannot unpack {archive}: {type(err).__name__}: {err}") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
