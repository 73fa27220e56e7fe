"""A folder of a run's files as one gzipped tar, wherever its members are read from (this
disk: app.runs.files.work_dir.local; the artifact store: app.runs.files.work_dir.store)."""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import PurePosixPath
from typing import IO

from app.runs.files.job_files import FileRefused

CHUNK = 1 << 20

# One member of a folder's archive: its name in the tar, size, mtime and an opener of its bytes.
Member = tuple[str, int, float, Callable[[], IO[bytes]]]


def tar_chunks(members: Iterable[Member]) -> Iterator[bytes]:
    """A gzipped tar of ``members``, built first (spooled to disk past 64 MiB, so a large
    checkpoint folder never sits in memory), then given in 1 MiB chunks. A member that can no
    longer be opened (replaced since the listing) is left out."""
    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
        with tarfile.open(fileobj=spool, mode="w:gz", compresslevel=1) as tar:
            for name, size, mtime, opener in members:
                try:
                    source = opener()
                except (FileRefused, FileNotFoundError):
                    continue
                entry = tarfile.TarInfo(name)
                entry.size, entry.mtime, entry.mode = size, int(mtime), 0o644
                with source:
                    tar.addfile(entry, source)
        spool.seek(0)
        while chunk := spool.read(CHUNK):
            yield chunk


def member_name(path: str, folder: str) -> str:
    """Entries are named from the folder on: checkpoint-500/model.safetensors."""
    return path[len(folder) - len(PurePosixPath(folder).name) :]
