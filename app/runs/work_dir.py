"""Files a run wrote under its working directory (``<run_dir>/work``: a script's
``model_best.pt``, a Lightning ``.ckpt``, a Hugging Face ``checkpoint-500/``): listed, and
served without ever leaving the directory. torchyard's own files (spool, log, config) sit
beside it in the run directory, so no path here reaches them.

The directory is written by the job, which is someone's code: every path in it is hostile.
Nothing here follows a symbolic link or opens anything but a regular file: a download opens
its path through app.runs.job_files (one component at a time, ``O_NOFOLLOW|O_NONBLOCK``,
checked with ``fstat``), so a link or FIFO swapped in between a check and the open is refused.
"""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO

from app.runs.job_files import FileRefused, folder_entries, open_in
from app.runs.job_files import components as _components
from app.settings import get_settings
from torchyard.contract import RunPaths

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")
# A listing stops here: a run that wrote a million files is still listed in a moment.
MAX_LISTED = 10_000
CHUNK = 1 << 20


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


@dataclass(frozen=True)
class Download:
    name: str
    chunks: Iterator[bytes]
    size: int | None
    folder: bool  # chunks of a .tar.gz of the folder's files


def run_files(run_id: int) -> list[RunFile]:
    """The run's files: from its working directory on this machine, else (an API on another
    host than the worker) from the artifact store, where the worker left them at the end."""
    from app.runs import work_dir_store  # it builds on this module

    settings = get_settings()
    root = RunPaths(settings.run_dir(run_id)).work
    if root.is_dir() or not settings.artifact_store:
        return list_files(root)
    return work_dir_store.listing(settings.artifact_store, run_id) or []


def download(run_id: int, relative: str) -> Download:
    """One file, or a folder as a tar.gz; FileRefused for a path that is not the run's,
    FileNotFoundError for one that is not there."""
    from app.runs import work_dir_store  # it builds on this module

    settings = get_settings()
    root = RunPaths(settings.run_dir(run_id)).work
    name = PurePosixPath(relative.strip("/")).name
    if root.is_dir() or not settings.artifact_store:
        fd, info = open_in(root, relative)
        if stat.S_ISDIR(info.st_mode):
            os.close(fd)
            return Download(f"{name}.tar.gz", folder_archive(root, relative), None, True)
        return Download(name, read_chunks(fd), info.st_size, False)
    path = "/".join(_components(relative))
    listed = work_dir_store.listing(settings.artifact_store, run_id) or []
    for item in listed:
        if item.path == path:
            chunks = work_dir_store.chunks(settings.artifact_store, run_id, path)
            return Download(name, chunks, item.size_bytes, False)
    inside = [item for item in listed if item.path.startswith(path + "/")]
    if inside:
        archive = work_dir_store.folder_archive(settings.artifact_store, run_id, inside, path)
        return Download(f"{name}.tar.gz", archive, None, True)
    raise FileNotFoundError(relative)
