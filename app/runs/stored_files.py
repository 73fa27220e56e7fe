"""A run's working-directory files as the worker left them in the artifact store
(worker/run_files.py), for an API whose disk does not hold the run directory.

The listing (``<store>/runs/<id>/work.json``) was written by the worker, but from a directory
a job wrote: it is read as hostile input, each entry checked for its types and for a path
that stays inside the run (no ``..``, no absolute path), and a download is served only for a
path that is in it.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any

from app.artifacts import run_files_key, store_fs
from app.runs.files import CHUNK, Member, RunFile, member_name, tar_chunks

MAX_LISTING_BYTES = 64 * 1024 * 1024


def listing(store: str, run_id: int) -> list[RunFile] | None:
    """The stored files, None when the worker stored none (or the run has not ended)."""
    fs, root = store_fs(store)
    try:
        with fs.open(f"{run_files_key(root, run_id)}.json", "rb") as f:
            raw = f.read(MAX_LISTING_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(raw) > MAX_LISTING_BYTES:
        return None
    try:
        entries = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entries, list):
        return None
    found = [item for item in map(_entry, entries) if item is not None]
    return sorted(found, key=lambda f: f.path)


def _entry(entry: Any) -> RunFile | None:
    if not isinstance(entry, dict):
        return None
    path, size = entry.get("path"), entry.get("size_bytes")
    if not isinstance(path, str) or not isinstance(size, int) or isinstance(size, bool):
        return None
    normal = posixpath.normpath(path)
    if normal != path or path.startswith("/") or ".." in path.split("/") or "\x00" in path:
        return None
    try:
        modified = datetime.fromisoformat(str(entry.get("modified_at")))
    except ValueError:
        return None
    return RunFile(path, size, modified, bool(entry.get("checkpoint")))


def chunks(store: str, run_id: int, path: str) -> Iterator[bytes]:
    fs, root = store_fs(store)
    with fs.open(f"{run_files_key(root, run_id)}/{path}", "rb") as f:
        while block := f.read(CHUNK):
            yield block


def folder_archive(store: str, run_id: int, items: list[RunFile], folder: str) -> Iterator[bytes]:
    """The stored files under ``folder`` as a tar.gz, each streamed from the store with the
    size the store gives (the listing's sizes are the job's word, not the store's)."""
    fs, root = store_fs(store)
    base = run_files_key(root, run_id)

    def members() -> Iterator[Member]:
        for item in items:
            key = f"{base}/{item.path}"
            try:
                size = int(fs.size(key))
            except FileNotFoundError:
                continue
            opener = partial(fs.open, key, "rb")
            yield member_name(item.path, folder), size, item.modified_at.timestamp(), opener

    return tar_chunks(members())
