"""Every member of a code snapshot checked, by the API on upload and by the worker again on
extraction (the worker trusts neither the upload path nor the store).

What a snapshot may hold: regular files, directories, hard links to an earlier regular file of
the snapshot (extracted as a copy), and symbolic links whose target is relative and has no
``..`` (so a link only ever points at or below its own folder: however links chain, nothing
resolves outside the snapshot; ``README -> docs/README.md`` works, ``data -> ../shared`` does
not). No member may lie under a symbolic link (a write through a link is how extractors are
escaped). Refused, naming the member: absolute paths, ``..``, device and FIFO files, a name that
appears twice, more than ``max_members`` members, regular files adding up to more than
``max_unpacked_bytes`` (a gzip bomb), and extended headers over 1 MiB (tarfile would read one
into memory whole).

Two layers, both on every member. Ours first, for what the standard library's extraction
filter does not know: the limits (members, unpacked bytes, extended headers), duplicates,
members under a link, hard links only to an earlier file, symbolic links without ``..`` even
when they stay inside, and a refusal (not a silent strip) of an absolute name; each with our
sentence naming the member. Then ``tarfile.data_filter`` (Python 3.11.4+) has the last word:
it refuses device, FIFO and unknown members, and anything that would land or point outside
the destination, so a hole in our rules is not a way out.

The tar is read as a stream (``r|``): one pass, never seeking, so it works the same on a file
and on a pipe, and what is checked is what is extracted.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Self

from app.experiments.requirements import MAX_REQUIREMENTS_FILE_BYTES as REQUIREMENTS_FILE_MAX

MAX_NAME_CHARS = 1000
REQUIREMENTS_FILE = "requirements.txt"
MAX_EXTENDED_HEADER_BYTES = 1024 * 1024
# tarfile's stream reader joins its reads into one bytes per read call: same-sized blocks on both
# sides keep that linear (1 MiB reads of a 10 KiB-buffered stream took 4 s for 50 MiB).
COPY_BLOCK = 256 * 1024
_EXTENDED = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


class TarRefused(ValueError):
    """The archive is not an acceptable snapshot; ``member`` (when one is to blame) and
    ``problem`` say why, and ``str()`` is a sentence for the user."""

    def __init__(self, problem: str, member: str | None = None) -> None:
        self.member = member
        self.problem = problem
        super().__init__(f"member {member!r}: {problem}" if member is not None else problem)


@dataclass(frozen=True)
class Limits:
    max_members: int
    max_unpacked_bytes: int

    @classmethod
    def from_settings(cls) -> Limits:
        from app.settings import get_settings

        settings = get_settings()
        return cls(settings.max_code_members, settings.max_code_unpacked_bytes)


@dataclass
class Contents:
    """What a checked snapshot holds: its regular files (path, size) in archive order."""

    files: list[tuple[str, int]] = field(default_factory=list)
    unpacked_bytes: int = 0
    members: int = 0
    # The root's requirements.txt, when a regular file of at most REQUIREMENTS_FILE_MAX
    # bytes: checked when a config names the snapshot (app.experiments.config).
    requirements: str | None = None


# What data_filter is told the destination is while only scanning (the API's check writes
# nothing): a path that does not exist resolves as written, so its checks are lexical.
_SCAN_ROOT = "/nonexistent/torchyard-snapshot-scan"


class _CheckedInfo(tarfile.TarInfo):
    """Refuses an oversized extended header before tarfile reads it into memory: ``frombuf``
    (documented) parses each 512-byte header, before tarfile reads the body an extended header
    announces; no extraction filter sees a header that is not a member."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        info = super().frombuf(buf, encoding, errors)
        if info.type in _EXTENDED and info.size > MAX_EXTENDED_HEADER_BYTES:
            raise TarRefused(
                f"an extended header of {info.size} bytes (at most {MAX_EXTENDED_HEADER_BYTES})"
            )
        return info


def clean_name(name: str) -> str:
    """The member's path relative to the snapshot root ('' for the root itself), or
    TarRefused when it is absolute, has '..', or is unreasonably long."""
    if len(name) > MAX_NAME_CHARS:
        raise TarRefused(f"a path longer than {MAX_NAME_CHARS} characters", name[:80] + "...")
    if name.startswith("/") or PurePosixPath(name).is_absolute():
        raise TarRefused("an absolute path (paths must be relative to the snapshot)", name)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise TarRefused("a path with '..' (it would leave the snapshot)", name)
    return "/".join(parts)


def _parents(path: str) -> Iterator[str]:
    parts = path.split("/")
    for i in range(1, len(parts)):
        yield "/".join(parts[:i])


class _Checker:
    """The rules that need the members seen so far: duplicates, links, counts, sizes."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.contents = Contents()
        self.seen: dict[str, str] = {}  # path -> "file" | "dir" | "link"
        self.parents: set[str] = set()
        self.sizes: dict[str, int] = {}

    def check(self, member: tarfile.TarInfo, dest: str) -> str:
        """Our rules, then the standard library's data filter as if extracting into
        ``dest``: the member's clean path, or TarRefused naming it."""
        c = self.contents
        c.members += 1
        if c.members > self.limits.max_members:
            raise TarRefused(
                f"more than {self.limits.max_members} members (max_code_members)", member.name
            )
        path = clean_name(member.name)
        if not path:
            if member.isdir():
                return path
            raise TarRefused("the snapshot root must be a directory", member.name)
        if path in self.seen and not (member.isdir() and self.seen[path] == "dir"):
            raise TarRefused("appears twice in the archive", member.name)
        if not member.isdir() and path in self.parents:
            raise TarRefused("is also a folder of earlier members", member.name)
        for parent in _parents(path):
            if self.seen.get(parent) in ("link", "file"):
                raise TarRefused(f"lies under {parent!r}, which is not a directory", member.name)
        if member.isreg():
            kind = "file"
            c.unpacked_bytes += member.size
            if c.unpacked_bytes > self.limits.max_unpacked_bytes:
                raise TarRefused(
                    f"the files unpack to more than {self.limits.max_unpacked_bytes} bytes "
                    "(max_code_unpacked_bytes)",
                    member.name,
                )
            c.files.append((path, member.size))
            self.sizes[path] = member.size
        elif member.isdir():
            kind = "dir"
        elif member.issym():
            kind = "link"
            self._check_symlink(member, path)
        elif member.islnk():
            kind = "file"
            try:
                target = clean_name(member.linkname)
            except TarRefused as exc:
                raise TarRefused(f"a hard link to {exc.problem}", member.name) from None
            if self.seen.get(target) != "file":
                raise TarRefused(
                    f"a hard link to {member.linkname!r}, which is not an earlier file of the "
                    "snapshot",
                    member.name,
                )
            size = self.sizes[target]
            c.unpacked_bytes += size
            if c.unpacked_bytes > self.limits.max_unpacked_bytes:
                raise TarRefused(
                    f"the files unpack to more than {self.limits.max_unpacked_bytes} bytes "
                    "(max_code_unpacked_bytes)",
                    member.name,
                )
            c.files.append((path, size))
            self.sizes[path] = size
        else:
            kind = "other"  # refused by data_filter just below, with our sentence
        _data_filter(member, dest, path)
        self.seen[path] = kind
        self.parents.update(_parents(path))
        return path

    def _check_symlink(self, member: tarfile.TarInfo, path: str) -> None:
        target = member.linkname
        if not target or target.startswith("/"):
            raise TarRefused(
                f"a symbolic link to {target!r}: links must be relative and stay in their folder",
                member.name,
            )
        if ".." in target.split("/"):
            raise TarRefused(
                f"a symbolic link to {target!r}: '..' in a link target is not allowed (it could "
                "point out of the snapshot)",
                member.name,
            )
        if path in self.parents:
            raise TarRefused("a symbolic link with other members under it", member.name)


def _data_filter(member: tarfile.TarInfo, dest: str, path: str) -> None:
    """``tarfile.data_filter`` on the member; its refusal as our sentence naming the member."""
    try:
        tarfile.data_filter(member, dest)
    except tarfile.SpecialFileError:
        if member.ischr() or member.isblk():
            problem = "a device file (only files, folders and links are allowed)"
        elif member.isfifo():
            problem = "a FIFO (only files, folders and links are allowed)"
        else:
            problem = f"an unsupported member type {member.type!r}"
        raise TarRefused(problem, path) from None
    except (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError):
        kind = "symbolic" if member.issym() else "hard"
        raise TarRefused(
            f"a {kind} link to {member.linkname!r}, which points out of the snapshot", path
        ) from None
    except tarfile.FilterError as exc:
        raise TarRefused(f"a path that leaves the snapshot ({exc})", path) from None


def _open_stream(path: Path) -> tuple[gzip.GzipFile, tarfile.TarFile]:
    raw = gzip.open(path, "rb")
    try:
        tar = tarfile.open(fileobj=raw, mode="r|", tarinfo=_CheckedInfo, bufsize=COPY_BLOCK)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raw.close()
        raise TarRefused(f"not a gzipped tar archive ({exc})") from None
    return raw, tar


def scan(path: Path, limits: Limits) -> Contents:
    """Check every member of the .tar.gz at ``path`` (data read through, nothing written)."""
    checker = _Checker(limits)
    raw, tar = _open_stream(path)
    try:
        with raw, tar:
            for member in tar:
                name = checker.check(member, _SCAN_ROOT)
                if (
                    name == REQUIREMENTS_FILE
                    and member.isfile()
                    and member.size <= REQUIREMENTS_FILE_MAX
                ):
                    data = tar.extractfile(member)
                    assert data is not None  # a regular member always has data
                    checker.contents.requirements = data.read().decode("utf-8", "replace")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise TarRefused(f"a damaged archive ({exc})") from None
    return checker.contents


def extract(path: Path, dest: Path, limits: Limits) -> Contents:
    """Check and extract the .tar.gz at ``path`` into ``dest`` (created here; it must not
    exist). Links are made last, so no file is ever written through one; a refused archive
    leaves ``dest`` removed."""
    dest.mkdir(mode=0o700)
    try:
        return _extract_into(path, dest, limits)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _extract_into(path: Path, dest: Path, limits: Limits) -> Contents:
    checker = _Checker(limits)
    links: list[tuple[str, str]] = []
    raw, tar = _open_stream(path)
    root = str(dest)
    try:
        with raw, tar:
            for member in tar:
                rel = checker.check(member, root)
                if not rel:
                    continue
                target = dest / rel
                if member.isdir():
                    target.mkdir(mode=0o755, parents=True, exist_ok=True)
                elif member.issym():
                    links.append((rel, member.linkname))
                elif member.islnk():
                    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                    with (dest / clean_name(member.linkname)).open("rb") as copied:
                        _write_new(target, copied, _mode(member))
                else:
                    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                    data = tar.extractfile(member)
                    assert data is not None  # a regular member always has data
                    _write_new(target, data, _mode(member))
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TarRefused(f"a damaged archive ({exc})") from None
    for rel, linkname in links:
        (dest / rel).parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.symlink(linkname, dest / rel)
    return checker.contents


def _mode(member: tarfile.TarInfo) -> int:
    return 0o755 if member.mode & stat.S_IXUSR else 0o644


def _write_new(target: Path, source: IO[bytes], mode: int) -> None:
    """A new regular file (never an existing one, never through a link)."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(source, out, COPY_BLOCK)
