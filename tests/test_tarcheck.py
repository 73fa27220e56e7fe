"""app/code/tarcheck.py's two layers on a snapshot archive: our rules (limits, duplicates,
links) for what the standard library's ``tarfile.data_filter`` lets through, and the filter
itself as the last word on every member. Pure: archives built here, extracted into tmp_path."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from app.code.tarcheck import MAX_EXTENDED_HEADER_BYTES, Limits, TarRefused, extract, scan
from tests.code_archives import Member, tar_gz

ROOMY = Limits(max_members=100, max_unpacked_bytes=1024 * 1024)

# Shapes the data filter alone would extract (each member passes tarfile.data_filter), with
# the limits they are checked under, the member blamed and what our refusal says.
FILTER_LETS_THROUGH: dict[str, tuple[list[Member], Limits, str, str]] = {
    "too many members": (
        [(f"f{i}.py", "file", b"") for i in range(4)],
        Limits(max_members=3, max_unpacked_bytes=1024),
        "f3.py",
        "more than 3 members",
    ),
    "unpacked bytes": (
        [("a.bin", "file", bytes(600)), ("b.bin", "file", bytes(600))],
        Limits(max_members=10, max_unpacked_bytes=1000),
        "b.bin",
        "unpack to more than 1000 bytes",
    ),
    "unpacked bytes through hard links": (
        [("a.bin", "file", bytes(600)), ("b.bin", "lnk", "a.bin")],
        Limits(max_members=10, max_unpacked_bytes=1000),
        "b.bin",
        "unpack to more than 1000 bytes",
    ),
    "a name twice": ([("a.py", "file", b"1"), ("a.py", "file", b"2")], ROOMY, "a.py", "twice"),
    "a file over a folder": (
        [("a/b.py", "file", b"1"), ("a", "file", b"2")],
        ROOMY,
        "a",
        "also a folder",
    ),
    "a write through a link inside": (
        [("sub", "dir", None), ("d", "sym", "sub"), ("d/f.txt", "file", b"x")],
        ROOMY,
        "d/f.txt",
        "lies under 'd'",
    ),
    "'..' in a link that stays inside": (
        [("a", "dir", None), ("a/up", "sym", "../b"), ("b", "file", b"x")],
        ROOMY,
        "a/up",
        "'..' in a link target",
    ),
    "a hard link to a later file": (
        [("h", "lnk", "later.txt"), ("later.txt", "file", b"x")],
        ROOMY,
        "h",
        "not an earlier file",
    ),
    "'..' that stays inside": ([("a/../b.txt", "file", b"x")], ROOMY, "a/../b.txt", "'..'"),
    "an absolute name (the filter strips its '/')": (
        [("/b.txt", "file", b"x")],
        ROOMY,
        "/b.txt",
        "absolute",
    ),
}

# Members that would escape an extractor that trusted them: refused by both layers.
HOSTILE: dict[str, tuple[Member, str]] = {
    "path traversal": (("../../escape.txt", "file", b"x"), "'..'"),
    "absolute path": (("/tmp/torchyard-tarcheck-escape.txt", "file", b"x"), "absolute"),
    "character device": (("dev", "chr", None), "device file"),
    "FIFO": (("pipe", "fifo", None), "FIFO"),
    "symbolic link out": (("out", "sym", "../../.."), "symbolic link"),
    "absolute symbolic link": (("etc", "sym", "/etc"), "symbolic link"),
    "hard link out": (("passwd", "lnk", "/etc/passwd"), "hard link"),
}


def _archive(tmp_path: Path, members: list[Member]) -> Path:
    path = tmp_path / "snapshot.tar.gz"
    path.write_bytes(tar_gz(members))
    return path


def _members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return tar.getmembers()


@pytest.mark.parametrize("shape", sorted(FILTER_LETS_THROUGH))
def test_what_the_data_filter_lets_through_our_rules_refuse_naming_the_member(
    tmp_path: Path, shape: str
) -> None:
    members, limits, blamed, says = FILTER_LETS_THROUGH[shape]
    for member in _members(tar_gz(members)):
        tarfile.data_filter(member, str(tmp_path / "dest"))  # the filter alone: no refusal
    archive = _archive(tmp_path, members)
    with pytest.raises(TarRefused) as scanned:
        scan(archive, limits)
    assert scanned.value.member == blamed and says in str(scanned.value)
    with pytest.raises(TarRefused) as extracted:
        extract(archive, tmp_path / "dest", limits)
    assert extracted.value.member == blamed and says in str(extracted.value)
    assert not (tmp_path / "dest").exists()  # a refused archive leaves nothing


def test_an_extended_header_past_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Not a member, so no extraction filter sees it: checked as its header is parsed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("train.py")
        info.pax_headers = {"comment": "x" * (MAX_EXTENDED_HEADER_BYTES + 1)}
        tar.addfile(info, io.BytesIO(b""))
    archive = tmp_path / "pax.tar.gz"
    archive.write_bytes(gzip.compress(buf.getvalue()))
    with pytest.raises(TarRefused, match="an extended header of"):
        scan(archive, ROOMY)
    with pytest.raises(TarRefused, match="an extended header of"):
        extract(archive, tmp_path / "dest", ROOMY)


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_a_hostile_member_is_still_refused_and_nothing_lands_outside(
    tmp_path: Path, shape: str
) -> None:
    member, says = HOSTILE[shape]
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    archive = _archive(work, [("ok.py", "file", b"1"), member])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(TarRefused) as scanned:
        scan(archive, ROOMY)
    assert scanned.value.member == member[0] and says in str(scanned.value)
    with pytest.raises(TarRefused) as extracted:
        extract(archive, work / "dest", ROOMY)
    assert extracted.value.member == member[0] and says in str(extracted.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert not Path("/tmp/torchyard-tarcheck-escape.txt").exists()


def test_a_good_snapshot_extracts_with_our_modes_and_links_last(tmp_path: Path) -> None:
    members: list[Member] = [
        ("train.py", "file", b"print(1)\n"),
        ("data", "dir", None),
        ("data/x.txt", "file", b"x\n"),
        ("README", "sym", "data/x.txt"),
        ("copy.txt", "lnk", "data/x.txt"),
    ]
    contents = extract(_archive(tmp_path, members), tmp_path / "dest", ROOMY)
    dest = tmp_path / "dest"
    assert (dest / "README").is_symlink() and (dest / "README").read_text() == "x\n"
    assert (dest / "copy.txt").stat().st_ino != (dest / "data/x.txt").stat().st_ino  # a copy
    assert (dest / "train.py").stat().st_mode & 0o777 == 0o644
    assert contents.members == 5 and contents.unpacked_bytes == 9 + 2 + 2
