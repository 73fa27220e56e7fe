"""A .zip upload (the new-experiment page's zip, or a folder zipped by hand) turned into the
one stored form, a .tar.gz, before anything else looks at it.

The conversion is deterministic (members in the zip's order, the zip's timestamps, a gzip
header without a time), so the same zip bytes always give the same tar.gz and so the same
digest. Its members pass the same name checks as a tar's (app.code.tarcheck.clean_name) and the
same caps; a zip's symbolic links are refused (zip has no portable link type: upload a tar.gz
to keep links). The result is checked again as a tar like any other upload.
"""

from __future__ import annotations

import calendar
import gzip
import stat
import tarfile
import zipfile
from pathlib import Path

from app.code.tarcheck import Limits, TarRefused, clean_name

ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
GZIP_MAGIC = b"\x1f\x8b"


def zip_to_tar_gz(source: Path, target: Path, limits: Limits) -> None:
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise TarRefused(f"not a readable zip archive ({exc})") from None
    # No name and no time in the gzip header: the same zip gives the same bytes.
    with archive, target.open("wb") as out:
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                _copy_members(archive, tar, limits)


def _copy_members(archive: zipfile.ZipFile, tar: tarfile.TarFile, limits: Limits) -> None:
    infos = archive.infolist()
    if len(infos) > limits.max_members:
        raise TarRefused(f"more than {limits.max_members} members (max_code_members)")
    total = 0
    seen: set[str] = set()
    for info in infos:
        path = clean_name(info.filename)
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise TarRefused("a symbolic link in a zip (upload a tar.gz to keep links)", path)
        if not path or path in seen:
            if not path or info.is_dir():
                continue
            raise TarRefused("appears twice in the archive", info.filename)
        seen.add(path)
        entry = tarfile.TarInfo(path)
        entry.mtime = calendar.timegm((*info.date_time, 0, 0, 0))
        if info.is_dir():
            entry.type = tarfile.DIRTYPE
            entry.mode = 0o755
            tar.addfile(entry)
            continue
        total += info.file_size
        if total > limits.max_unpacked_bytes:
            raise TarRefused(
                f"the files unpack to more than {limits.max_unpacked_bytes} bytes "
                "(max_code_unpacked_bytes)",
                info.filename,
            )
        entry.size = info.file_size
        entry.mode = 0o755 if mode & stat.S_IXUSR else 0o644
        try:
            # ZipExtFile stops at file_size and checks the CRC: a lying header cannot make
            # more bytes than declared.
            with archive.open(info) as data:
                tar.addfile(entry, data)
        # RuntimeError: an encrypted member (no password to give)
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError) as exc:
            raise TarRefused(f"cannot be read from the zip ({exc})", info.filename) from None
