"""Hostile archives (issue 19): an archive source or an .mxl never writes outside the cache,
never unpacks past its caps, and its refusal names the archive, the member and the param.

Every archive is built here, in tmp_path; each test checks the whole of tmp_path afterwards,
so a file written anywhere outside the cache would be seen.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from sonfolio.config.data import ScoreLimits, ScoreSource
from sonfolio.score.data.archives import check_mxl, mxl_caps
from sonfolio.score.data.dataset import parse_unit
from sonfolio.score.data.parse import SourceError, pieces_from_file, too_large
from sonfolio.score.data.sources import (
    SCORE_EXTENSIONS,
    SourceConfigError,
    Unit,
    list_units,
    music21_corpus_root,
)

MB = 1 << 20


@pytest.fixture
def limits(params) -> ScoreLimits:
    return params.score_data.limits


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_file(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def add_link(tf: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tf.addfile(info)


def files_outside(tmp_path: Path, allowed: set[Path]) -> list[Path]:
    """Every file under tmp_path that is not one of `allowed` (the inputs the test made)."""
    return [
        p
        for p in tmp_path.rglob("*")
        if not p.is_dir() and p not in allowed and tmp_path / "cache" not in p.parents
    ]


def refuse(archive: Path, tmp_path: Path, limits: ScoreLimits, *match: str) -> str:
    """Run the source through fetch, unpack and listing: refused, nothing written."""
    source = ScoreSource(name="theirs", archive=str(archive), sha256=sha(archive))
    cache = tmp_path / "cache"
    with pytest.raises(SourceConfigError) as err:
        list_units(source, cache, 0, limits)
    message = str(err.value)
    for m in (str(archive.name), *match):
        assert m in message, message
    # Nothing unpacked: no finished folder, no temporary one; only the verified download.
    kept = f"{sha(archive)}{''.join(archive.suffixes[-2:])}"
    assert [p.name for p in cache.iterdir()] == [kept], message
    assert files_outside(tmp_path, {archive}) == []
    return message


def test_a_symlink_member_is_refused_and_nothing_lands_outside(tmp_path, limits):
    """The CVE-2025-4517 shape: links, then a file written through them. Refused at the first
    link, whatever the Python release's tarfile filter would do."""
    (tmp_path / "outside").mkdir()
    archive = tmp_path / "chain.tar"
    with tarfile.open(archive, "w") as tf:
        add_link(tf, "a", ".")
        add_link(tf, "a/b", "../../outside")
        add_file(tf, "a/b/escaped.krn", b"**kern\n")
    message = refuse(archive, tmp_path, limits, "member 'a'", "symlink")
    assert not (tmp_path / "outside" / "escaped.krn").exists(), message


@pytest.mark.parametrize(
    ("kind", "what"), [(tarfile.LNKTYPE, "hard link"), (tarfile.CHRTYPE, "device file")]
)
def test_a_hard_link_or_a_device_member_is_refused(tmp_path, limits, kind, what):
    archive = tmp_path / "special.tar"
    with tarfile.open(archive, "w") as tf:
        add_file(tf, "ok.krn", b"**kern\n")
        add_link(tf, "bad", "/etc/passwd", kind)
    refuse(archive, tmp_path, limits, "member 'bad'", what)


@pytest.mark.parametrize("fmt", ["tar", "zip"])
@pytest.mark.parametrize("kind", ["dotdot", "absolute"])
def test_a_member_leaving_the_target_is_refused(tmp_path, limits, fmt, kind):
    (tmp_path / "outside").mkdir()
    name = "../../outside/evil.krn" if kind == "dotdot" else str(tmp_path / "outside/evil.krn")
    archive = tmp_path / f"evil.{fmt}"
    if fmt == "tar":
        with tarfile.open(archive, "w") as tf:
            add_file(tf, "ok.krn", b"**kern\n")
            add_file(tf, name, b"**kern\n")
    else:
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("ok.krn", "**kern\n")
            zf.writestr(zipfile.ZipInfo(name), "**kern\n")  # ZipInfo keeps the name as given
    refuse(archive, tmp_path, limits, f"member {name!r}", "absolute path or climbs out")
    assert not (tmp_path / "outside" / "evil.krn").exists()


def test_a_zip_bomb_is_refused_from_its_headers_naming_the_ratio_param(tmp_path, limits):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.krn", bytes(50 * MB))  # 50 MB of zeros: ~50 KB zipped
    assert archive.stat().st_size < MB
    message = refuse(archive, tmp_path, limits, "member 'big.krn'", "archive_max_ratio is 100")
    assert "raise it in params.yaml" in message


def test_a_tar_gz_past_the_size_cap_is_refused_naming_the_param(tmp_path, limits):
    archive = tmp_path / "big.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for i in range(3):  # incompressible: the ratio stays near 1, only the size cap trips
            add_file(tf, f"piece{i}.krn", os.urandom(MB))
    small = limits.model_copy(update={"archive_max_mb": 2})
    refuse(archive, tmp_path, small, "member 'piece2.krn'", "archive_max_mb is 2")


def test_too_many_members_are_refused_naming_the_param(tmp_path, limits):
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(5):
            zf.writestr(f"p{i}.krn", "**kern\n")
    few = limits.model_copy(update={"archive_max_members": 3})
    refuse(archive, tmp_path, few, "member 'p3.krn'", "archive_max_members is 3")


def lie_about_size(archive: Path, claimed: int) -> None:
    """Rewrite a one-member zip's headers (local and central) to claim `claimed` bytes."""
    data = bytearray(archive.read_bytes())
    local = data.index(b"PK\x03\x04")
    central = data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, local + 22, claimed)
    struct.pack_into("<I", data, central + 24, claimed)
    archive.write_bytes(bytes(data))


def test_a_zip_whose_header_lies_about_its_size_is_refused(tmp_path, limits):
    """The headers pass the caps; the data does not match them: refused, nothing left."""
    archive = tmp_path / "liar.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.krn", os.urandom(1000) + bytes(3 * MB))
    lie_about_size(archive, 1000)
    refuse(archive, tmp_path, limits, "cannot unpack")


def test_a_good_tar_gz_unpacks_inside_the_cache(tmp_path, limits):
    archive = tmp_path / "good.tar.gz"
    chorale = sorted((music21_corpus_root() / "bach").glob("bwv1*.mxl"))[0]
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(chorale, arcname=f"corpus/bach/{chorale.name}")
        add_file(tf, "corpus/notes.txt", b"not music")
    source = ScoreSource(name="theirs", archive=str(archive), sha256=sha(archive))
    units = list_units(source, tmp_path / "cache", 0, limits)
    assert [u.piece for u in units] == [f"theirs/corpus/bach/{chorale.name}"]
    assert units[0].path.read_bytes() == chorale.read_bytes()
    assert tmp_path / "cache" in units[0].path.parents


def mxl(path: Path, xml: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("META-INF/container.xml", "<container/>")
        zf.writestr("score.xml", xml)
    return path


def test_an_mxl_bomb_is_skipped_before_music21_opens_it(tmp_path, limits):
    """A small .mxl that unpacks past max_file_mb: skipped as too_large (counted by the stage),
    with the param named; music21 never sees it (it would unpack it in memory)."""
    bomb = mxl(tmp_path / "bomb.mxl", b"<score-partwise>" + b" " * (40 * MB))
    assert bomb.stat().st_size < MB
    with pytest.raises(SourceError) as err:
        pieces_from_file(bomb, limits=limits)
    assert err.value.reason == "too_large"
    assert "member 'score.xml'" in str(err.value) and "max_file_mb is 20" in str(err.value)
    assert parse_unit(Unit("mine", "mine/bomb.mxl", bomb), 4, limits).skip_reason == "too_large"


def test_an_mxl_with_a_symlink_member_is_refused(tmp_path, limits):
    path = tmp_path / "link.mxl"
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo("score.xml")
        info.external_attr = 0o120777 << 16  # a symlink's mode, as Info-ZIP stores it
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(SourceError) as err:
        pieces_from_file(path, limits=limits)
    assert err.value.reason == "unsafe_member" and "symlink" in str(err.value)


def test_no_file_of_music21s_corpus_trips_the_default_caps(limits):
    """The default pipeline reads music21's corpus: no default limit may skip any of it."""
    files = [p for p in music21_corpus_root().rglob("*") if p.suffix.lower() in SCORE_EXTENSIONS]
    assert len(files) > 3000
    for path in files:
        assert too_large(path, limits) is None, path
        if path.suffix.lower() == ".mxl":
            check_mxl(path, mxl_caps(limits))  # raises past a cap


def test_bytes_are_counted_while_writing_not_only_read_from_headers(tmp_path, limits, monkeypatch):
    """Were a header to pass the checks and then lie, the bytes written still stop at the cap."""
    import sonfolio.score.data.archives as archives

    monkeypatch.setattr(archives, "check_members", lambda *args: None)  # headers "pass"
    archive = tmp_path / "big.tar"
    with tarfile.open(archive, "w") as tf:
        add_file(tf, "piece.krn", os.urandom(3 * MB))
    small = limits.model_copy(update={"archive_max_mb": 1})
    refuse(archive, tmp_path, small, "member 'piece.krn'", "archive_max_mb is 1")
