"""What the API serves of a run's working directory: from this disk when the run's directory
is here, else (an API on another host than the worker) from the artifact store, where the
worker left the files at the end (app.runs.files.work_dir.store)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from app.runs.files.job_files import components, open_in
from app.runs.files.work_dir import store
from app.runs.files.work_dir.local import RunFile, folder_archive, list_files, read_chunks
from app.settings import get_settings
from torchyard.contract import RunPaths


@dataclass(frozen=True)
class Download:
    name: str
    chunks: Iterator[bytes]
    size: int | None
    folder: bool  # chunks of a .tar.gz of the folder's files


def run_files(run_id: int) -> list[RunFile]:
    """The run's files: from its working directory on this machine, else from the artifact
    store."""
    settings = get_settings()
    root = RunPaths(settings.run_dir(run_id)).work
    if root.is_dir() or not settings.artifact_store:
        return list_files(root)
    return store.listing(settings.artifact_store, run_id) or []


def download(run_id: int, relative: str) -> Download:
    """One file, or a folder as a tar.gz; FileRefused for a path that is not the run's,
    FileNotFoundError for one that is not there."""
    settings = get_settings()
    root = RunPaths(settings.run_dir(run_id)).work
    name = PurePosixPath(relative.strip("/")).name
    if root.is_dir() or not settings.artifact_store:
        fd, info = open_in(root, relative)
        if stat.S_ISDIR(info.st_mode):
            os.close(fd)
            return Download(f"{name}.tar.gz", folder_archive(root, relative), None, True)
        return Download(name, read_chunks(fd), info.st_size, False)
    path = "/".join(components(relative))
    listed = store.listing(settings.artifact_store, run_id) or []
    for item in listed:
        if item.path == path:
            chunks = store.chunks(settings.artifact_store, run_id, path)
            return Download(name, chunks, item.size_bytes, False)
    inside = [item for item in listed if item.path.startswith(path + "/")]
    if inside:
        archive = store.folder_archive(settings.artifact_store, run_id, inside, path)
        return Download(f"{name}.tar.gz", archive, None, True)
    raise FileNotFoundError(relative)
