"""Files of pinned Debian packages, read where they are installed or fetched without root.

Installed (dpkg put them under /): read in place. Otherwise `apt-get download name=version`
fetches each .deb into the download cache (no root needed), its sha256 is checked against the
pin, and `dpkg-deb -x` unpacks it into a scratch folder. Where neither works (not Debian, no
apt, no network) the caller is told why, in words that name what to install.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sonfolio.io import file_sha256

log = logging.getLogger(__name__)

APT_TIMEOUT_S = 600  # one `apt-get download` of ~11 MB; a stalled mirror fails, not hangs


@dataclass(frozen=True)
class DebPackage:
    """One Debian package at one version, and the sha256 of its .deb (as the archive's
    Packages index lists it: `apt-cache show name=version`)."""

    name: str
    version: str
    sha256: str

    @property
    def pinned(self) -> str:
        return f"{self.name}={self.version}"

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_all.deb"  # architecture `all`: data only


class PackageUnavailable(RuntimeError):
    """A package could not be had here; the message says why and what to install."""


class PackageMismatch(RuntimeError):
    """A downloaded .deb is not the pinned one (sha256); the message names the file."""


def installed_version(name: str) -> str | None:
    """The version dpkg has installed, or None (not installed, or no dpkg here)."""
    if shutil.which("dpkg-query") is None:
        return None
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status} ${Version}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    words = done.stdout.split()
    return words[-1] if done.returncode == 0 and "installed" in words[:3] else None


def _download(package: DebPackage, cache: Path) -> None:
    """`apt-get download` into `cache`, once more after a failure (a network fetch)."""
    if shutil.which("apt-get") is None:
        raise PackageUnavailable("apt-get is not on PATH (not a Debian-based system)")
    for attempt in (1, 2):
        try:
            done = subprocess.run(
                ["apt-get", "download", "-q", package.pinned],
                cwd=cache,
                capture_output=True,
                text=True,
                check=False,
                timeout=APT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            done = None
        if done is not None and done.returncode == 0 and (cache / package.filename).is_file():
            return
        why = "timed out" if done is None else done.stderr.strip()[-400:] or "no file written"
        log.warning("apt-get download %s failed (try %d of 2): %s", package.pinned, attempt, why)
    raise PackageUnavailable(f"`apt-get download {package.pinned}` failed: {why}")


def fetch(packages: tuple[DebPackage, ...], cache: Path) -> list[Path]:
    """Each package's .deb in `cache`: the one there when its sha256 is the pinned one, else
    downloaded with apt-get.

    Raises:
        PackageUnavailable: apt-get is absent or cannot download it.
        PackageMismatch: a downloaded file's sha256 is not the pinned one.
    """
    cache.mkdir(parents=True, exist_ok=True)
    debs = []
    for package in packages:
        deb = cache / package.filename
        if not (deb.is_file() and file_sha256(deb) == package.sha256):
            deb.unlink(missing_ok=True)
            _download(package, cache)
            if (found := file_sha256(deb)) != package.sha256:
                raise PackageMismatch(
                    f"{deb} has sha256 {found}, not the pinned {package.sha256} of "
                    f"{package.pinned}: delete it and rerun (a mirror serving other bytes for "
                    "that version is not to be trusted)"
                )
        debs.append(deb)
    return debs


@contextmanager
def unpacked(debs: list[Path]) -> Iterator[Path]:
    """A scratch folder holding the files of `debs` (`dpkg-deb -x`, no root), removed after.

    Raises:
        PackageUnavailable: dpkg-deb is absent or fails on a file.
    """
    if shutil.which("dpkg-deb") is None:
        raise PackageUnavailable("dpkg-deb is not on PATH (not a Debian-based system)")
    with tempfile.TemporaryDirectory(prefix="sonfolio-deb-") as tmp:
        root = Path(tmp)
        for deb in debs:
            done = subprocess.run(
                ["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                raise PackageUnavailable(f"dpkg-deb -x {deb} failed: {done.stderr.strip()[-400:]}")
        yield root
