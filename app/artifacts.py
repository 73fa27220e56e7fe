"""The shared artifact store: where checkpoints go when the hosts do not share a data dir.

``settings.artifact_store`` is an fsspec URL or a plain path (``/mnt/artifacts``,
``file:///srv/torchyard``, ``s3://bucket/prefix`` with the ``s3`` extra). Empty means the data
dir itself is shared (one box, or NFS) and nothing is copied. A checkpoint's copy lives at
``<store>/runs/<run_id>/checkpoints/<name>``; the worker uploads it (worker.artifacts) and
then records its full URL as ``checkpoints.uri`` (app.runs.files.checkpoint_records), which is all
the API needs to read it back.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
from fsspec.spec import AbstractFileSystem

READ_BLOCK = 1024 * 1024


def store_fs(url: str) -> tuple[AbstractFileSystem, str]:
    """The store's file system and its root path on it (no trailing slash)."""
    fs, root = fsspec.url_to_fs(url)
    return fs, str(root).rstrip("/")


def checkpoint_key(root: str, run_id: int, name: str) -> str:
    return f"{root}/runs/{run_id}/checkpoints/{name}"


def run_files_key(root: str, run_id: int) -> str:
    """Where a run's working-directory files go when it ends (app.runs.files.work_dir.store): each
    file at ``<key>/<path>``, and the listing at ``<key>.json``."""
    return f"{root}/runs/{run_id}/work"


def renames_atomically(fs: AbstractFileSystem) -> bool:
    """A local (or mounted) file system: write a temp name, then rename it into place. An
    object store's PUT is atomic by itself, and its "move" is a copy."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return "file" in protocols or "local" in protocols


@dataclass(frozen=True)
class StoredFile:
    """A file in the store, opened for streaming: ``size`` may be None when the store does not
    say."""

    size: int | None
    chunks: Iterator[bytes]


def open_uri(uri: str, *, store: str) -> StoredFile | None:
    """The file at ``uri`` (a ``checkpoints.uri``), or None when the store does not have it or
    ``uri`` is not inside ``store`` (the configured store: a row never steers a read anywhere
    else)."""
    if not store or not inside_store(uri, store):
        return None
    fs, path = fsspec.url_to_fs(uri)
    try:
        size = fs.size(path)
    except FileNotFoundError:
        return None
    return StoredFile(int(size) if size is not None else None, _chunks(fs, path))


def inside_store(uri: str, store: str) -> bool:
    fs, path = fsspec.url_to_fs(uri)
    store_fs_, root = store_fs(store)
    if type(fs) is not type(store_fs_):
        return False
    normalized = posixpath.normpath(str(path))
    return normalized.startswith(root + "/") and ".." not in normalized.split("/")


def _chunks(fs: AbstractFileSystem, path: str) -> Iterator[bytes]:
    with fs.open(path, "rb") as f:
        while block := f.read(READ_BLOCK):
            yield block


def remove_stored(store: str, uri: str) -> None:
    """Remove a checkpoint's copy from the store (only a URI inside ``store``: a row never
    steers a removal anywhere else); a copy already gone is fine."""
    if not inside_store(uri, store):
        return
    fs, _root = store_fs(store)
    _fs, path = fsspec.url_to_fs(uri)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass
