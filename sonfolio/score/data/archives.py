"""Archives opened safely: an archive source unpacked into the cache, an .mxl checked before
music21 reads it.

Why the standard library's own guards are not used alone: on the Python 3.11 releases the
project accepts, tarfile's `filter="data"` lets a chain of symlinks whose resolved path passes
PATH_MAX write outside the target (CVE-2025-4517, fixed in 3.11.13), and zipfile checks no
size at all (a 1 MB zip unpacked to 1.1 GB). A music corpus needs nothing but files and
folders, so any other member (symlink, hard link, device, fifo) is refused, and each file is
written here from the member's data at a path checked to stay inside the target: with no link
ever created, nothing can resolve outside it. The size, member count and compression ratio
are checked from the headers before anything is written, and the bytes are counted again
while writing, as a header can lie.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from sonfolio.config.data import ScoreLimits

MB = 1 << 20
_BLOCK = 1 << 20  # bytes copied at a time while writing a member


class UnsafeArchive(ValueError):
    """An archive that is refused: the message names the archive, the member and the limit's
    param; `reason` is "too_large" (a limit) or "unsafe_member" (always refused)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Caps:
    """What one archive may hold; `size_key` is the param that sets `max_bytes`."""

    max_bytes: int
    size_key: str
    max_members: int
    max_ratio: float


def source_caps(limits: ScoreLimits) -> Caps:
    """The caps of an archive source (a .zip / .tar.* of music files)."""
    return _caps(limits, "archive_max_mb")


def mxl_caps(limits: ScoreLimits) -> Caps:
    """The caps of an .mxl: it unpacks to one piece, so a music file's size cap bounds it."""
    return _caps(limits, "max_file_mb")


def _caps(limits: ScoreLimits, size_key: str) -> Caps:
    """Caps whose size is the param `size_key` of score_data.limits (in MB)."""
    return Caps(
        int(getattr(limits, size_key) * MB),
        f"score_data.limits.{size_key}",
        limits.archive_max_members,
        limits.archive_max_ratio,
    )


@dataclass(frozen=True)
class Member:
    name: str
    size: int  # bytes once unpacked, as the header says
    kind: str  # "file", "folder", or what else it is ("symlink", "hard link", ...)


def _mb(n: float) -> str:
    return f"{n / MB:,.1f} MB"


def check_members(archive: Path, members: Iterable[Member], caps: Caps) -> None:
    """Refuse, from the headers, an archive whose members would leave the target, are not
    plain files or folders, or pass a cap. Stops at the first bad member, so a huge listing
    (a tar is listed by decompressing it) costs at most the caps.

    Raises:
        UnsafeArchive: naming the archive, the member, and the param to raise where a limit.
    """
    packed = max(archive.stat().st_size, 1)
    total = 0
    for count, m in enumerate(members, 1):
        if m.kind not in ("file", "folder"):
            raise UnsafeArchive(
                f"archive {archive}: member {m.name!r} is a {m.kind}; only files and folders "
                "are unpacked (a link or device could write outside the cache): remove it",
                "unsafe_member",
            )
        safe_parts(archive, m.name)
        if count > caps.max_members:
            raise UnsafeArchive(
                f"archive {archive}: member {m.name!r} is its member number {count:,}; "
                f"score_data.limits.archive_max_members is {caps.max_members:,}: raise it in "
                "params.yaml",
                "too_large",
            )
        total += m.size
        _check_total(archive, m.name, total, caps)
        if total > caps.max_ratio * packed and total > MB:  # a few KB may compress any amount
            raise UnsafeArchive(
                f"archive {archive}: up to member {m.name!r} it unpacks to {_mb(total)}, "
                f"{total / packed:,.0f}x its {packed:,} bytes; score_data.limits."
                f"archive_max_ratio is {caps.max_ratio:g}: raise it in params.yaml",
                "too_large",
            )


def _check_total(archive: Path, name: str, total: int, caps: Caps) -> None:
    if total > caps.max_bytes:
        raise UnsafeArchive(
            f"archive {archive}: up to member {name!r} it unpacks to {_mb(total)}; "
            f"{caps.size_key} is {caps.max_bytes / MB:g}: raise it in params.yaml",
            "too_large",
        )


def safe_parts(archive: Path, name: str) -> tuple[str, ...]:
    """The parts of a member's path, refused if absolute or climbing out (`..`).

    Both separators count: a zip made on Windows may use backslashes.
    """
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if (
        not parts
        or name.startswith(("/", "\\"))
        or (len(parts[0]) >= 2 and parts[0][1] == ":")  # a drive: C:
        or ".." in parts
        or "\0" in name
    ):
        raise UnsafeArchive(
            f"archive {archive}: member {name!r} has an absolute path or climbs out with "
            "'..'; an archive must hold relative paths only: remove it",
            "unsafe_member",
        )
    return tuple(p for p in parts if p != ".")


def _zip_kind(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16  # Unix mode bits, where the zip was made on Unix
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device file"
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return "fifo or socket"
    return "folder" if info.is_dir() else "file"


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.isreg():
        return "file"
    if info.isdir():
        return "folder"
    if info.issym():
        return "symlink"
    if info.islnk():
        return "hard link"
    if info.ischr() or info.isblk():
        return "device file"
    return "fifo or special member"


def zip_members(zf: zipfile.ZipFile) -> Iterator[Member]:
    for info in zf.infolist():
        yield Member(info.filename, info.file_size, _zip_kind(info))


def check_mxl(path: Path, caps: Caps) -> None:
    """Check an .mxl (zipped MusicXML) before music21 unpacks it in memory.

    Raises:
        UnsafeArchive: a cap passed or a member refused. zipfile.BadZipFile: not a zip.
    """
    with zipfile.ZipFile(path) as zf:
        check_members(path, zip_members(zf), caps)


def unpack_into(archive: Path, target: Path, caps: Caps) -> None:
    """Unpack a .zip or .tar(.gz/.bz2/.xz) into the empty folder `target`, checked first.

    Raises:
        UnsafeArchive: a member refused or a cap passed (`target` may then hold part of the
            archive: the caller unpacks into a temporary folder and removes it).
        tarfile.TarError, zipfile.BadZipFile, OSError: a damaged archive.
    """
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            check_members(archive, zip_members(zf), caps)
            written = 0
            for info in zf.infolist():
                with zf.open(info) if not info.is_dir() else contextlib.nullcontext() as src:
                    written = _write(archive, info.filename, src, target, written, caps)
        return
    # A compressed tar is listed by decompressing it: first pass, headers only (stops at the
    # first bad member), then a second, sequential pass writes (seeking back would re-read).
    with tarfile.open(archive, "r:*") as tf:
        check_members(archive, (Member(m.name, m.size, _tar_kind(m)) for m in tf), caps)
    with tarfile.open(archive, "r:*") as tf:
        written = 0
        for m in tf:
            if _tar_kind(m) not in ("file", "folder"):  # cannot differ from the first pass
                raise UnsafeArchive(f"archive {archive} changed while unpacking", "unsafe_member")
            with tf.extractfile(m) if m.isreg() else contextlib.nullcontext() as src:
                written = _write(archive, m.name, src, target, written, caps)


def _write(
    archive: Path, name: str, src: IO[bytes] | None, target: Path, written: int, caps: Caps
) -> int:
    """Write one member (a folder when `src` is None) under `target`; the bytes written so far
    over the whole archive, checked against the size cap block by block."""
    dest = target.joinpath(*safe_parts(archive, name))
    root = os.path.realpath(target)
    # Nothing here creates a link, so this cannot fail; it is checked anyway, as the one
    # guarantee that matters (nothing outside the target) should not rest on reasoning alone.
    if os.path.commonpath([root, os.path.realpath(dest)]) != root:
        raise UnsafeArchive(f"archive {archive}: member {name!r} resolves outside", "unsafe_member")
    if src is None:
        dest.mkdir(parents=True, exist_ok=True)
        return written
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as out:
        while block := src.read(_BLOCK):
            written += len(block)
            _check_total(archive, name, written, caps)
            out.write(block)
    return written
