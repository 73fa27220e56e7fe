"""Building code snapshot archives for tests: good ones, and each malicious shape."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from typing import Any

# (name, kind, payload): kind file (bytes), dir, sym / lnk (link target), chr, fifo
Member = tuple[str, str, Any]


def tar_gz(members: list[Member]) -> bytes:
    """The same members give the same bytes (gzip's header time is 0, not now): a test that
    builds an archive twice, for its digest and then to compare, must get equal bytes even
    across a second's boundary (the authz matrix's code row failed 1 run in CI that way)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if kind == "file":
                info.size = len(payload)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "lnk": tarfile.LNKTYPE,
                "chr": tarfile.CHRTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind in ("sym", "lnk"):
                info.linkname = payload
            tar.addfile(info)
    return gzip.compress(buf.getvalue(), mtime=0)


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, (2024, 1, 2, 3, 4, 6)), data)
    return buf.getvalue()


# Each shape the API must refuse, with the member its 422 names.
MALICIOUS: dict[str, tuple[list[Member], str]] = {
    "absolute path": ([("/tmp/torchyard-escape.txt", "file", b"x")], "absolute"),
    "dot-dot": ([("../torchyard-escape.txt", "file", b"x")], "'..'"),
    "dot-dot inside": ([("a/../../torchyard-escape.txt", "file", b"x")], "'..'"),
    "absolute symlink": ([("escape", "sym", "/etc")], "symbolic link"),
    "dot-dot symlink": ([("escape", "sym", "../../outside")], "symbolic link"),
    "write through a symlink": (
        [("d", "sym", "sub"), ("d/f.txt", "file", b"x")],
        "lies under 'd'",
    ),
    "hard link out": ([("h", "lnk", "/etc/passwd")], "hard link"),
    "hard link to nothing": ([("h", "lnk", "not-there.txt")], "hard link"),
    "device file": ([("dev", "chr", None)], "device file"),
    "fifo": ([("pipe", "fifo", None)], "FIFO"),
    "duplicate": ([("a.py", "file", b"1"), ("a.py", "file", b"2")], "twice"),
    "file over a folder": ([("a/b.py", "file", b"1"), ("a", "file", b"2")], "also a folder"),
}

GOOD_SNAPSHOT: list[Member] = [
    ("train.py", "file", b""),  # replaced by the tests that run it
    ("helper.py", "file", b"GREETING = 'hello from the helper module'\n"),
    ("data", "dir", None),
    ("data/x.txt", "file", b"beside the script\n"),
    ("README", "sym", "data/x.txt"),
]
