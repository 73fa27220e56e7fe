"""A run's working-directory files on this disk: listed, read and archived without ever
leaving the directory. torchyard's own files (spool, log, config) sit beside it in the run
directory, so no path here reaches them.

Nothing here follows a symbolic link or opens anything but a regular file: a download opens
its path through app.runs.files.job_files (one component at a time, ``O_NOFOLLOW|O_NONBLOCK``,
checked with ``fstat``), so a link or FIFO swapped in between a check and the open is refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO

from app.runs.files.job_files import FileRefused, folder_entries, open_in
from app.runs.files.work_dir.archive import CHUNK, Member, member_name, tar_chunks

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")
# A listing stops here: a run that wrote a million files is still listed in a moment.
MAX_LISTED = 10_000


@dataclass(frozen=True)
class RunFile:
    path: str
    size_bytes: int
    modified_at: datetime
    checkpoint: bool


def is_checkpoint(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return path.endswith(CHECKPOINT_SUFFIXES) or any(p.startswith("checkpoint-") for p in parts)


def list_files(root: Path) -> list[RunFile]:
    """Regular files under ``root`` (no links followed), by path; at most MAX_LISTED."""
    found: list[RunFile] = []
    if not root.is_dir() or root.is_symlink():
        return found
    stack = [""]
    while stack and len(found) < MAX_LISTED:
        prefix = stack.pop()
        try:
            entries = sorted(folder_entries(root, prefix), key=lambda e: e[0])
        except (OSError, FileRefused):
            continue
        for name, info in entries:
            relative = f"{prefix}{name}"
            if stat.S_ISDIR(info.st_mode):
                stack.append(relative + "/")
            elif stat.S_ISREG(info.st_mode):
                found.append(
                    RunFile(
                        path=relative,
                        size_bytes=info.st_size,
                        modified_at=datetime.fromtimestamp(info.st_mtime, UTC),
                        checkpoint=is_checkpoint(relative),
                    )
                )
                if len(found) >= MAX_LISTED:
                    break
    return sorted(found, key=lambda f: f.path)


def read_chunks(fd: int) -> Iterator[bytes]:
    """The file behind ``fd`` in 1 MiB chunks; closes it at the end."""
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _reader(fd: int) -> Callable[[], IO[bytes]]:
    return lambda: os.fdopen(fd, "rb")


def folder_archive(root: Path, relative: str) -> Iterator[bytes]:
    """The regular files under the folder ``relative`` (links left out) as a tar.gz."""
    base = relative.strip("/")

    def members() -> Iterator[Member]:
        for item in list_files(root):
            if not item.path.startswith(base + "/"):
                continue
            try:
                fd, info = open_in(root, item.path)
            except (FileRefused, FileNotFoundError):
                continue  # replaced by something else since the listing
            if not stat.S_ISREG(info.st_mode):
                os.close(fd)
                continue
            yield member_name(item.path, base), info.st_size, info.st_mtime, _reader(fd)

    return tar_chunks(members())
