"""A run's working-directory files in the artifact store, for an API on another host than
the worker: copied there and listed (``store``), and listed and served from there.

When the worker's data dir is not the API's (``artifact_store`` set), the files a run wrote in
``<run_dir>/work`` (a script's ``model_best.pt``, a Lightning ``.ckpt``, a Hugging Face
``checkpoint-500/``) would stay on the worker's disk. After the final drain, before the final
status, the worker calls ``store`` (worker.work_dir_upload, which keeps the run's heartbeat
fresh meanwhile): each file is copied to ``<store>/runs/<id>/work/<path>`` in path order until
``run_files_store_max_bytes`` is reached, and the listing of what was stored goes to
``<store>/runs/<id>/work.json``. The files are read through the same fd-checked walk the API
uses (app.runs.files.work_dir.local): the job's directory is hostile input (no link is followed, no
FIFO is opened).

The listing came from a directory a job wrote, so it is read as hostile input too: each entry
checked for its types and for a path that stays inside the run (no ``..``, no absolute path),
and a download is served only for a path that is in it.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from app.artifacts import run_files_key, store_fs
from app.runs.files.job_files import FileRefused, open_in
from app.runs.files.work_dir.archive import CHUNK, Member, member_name, tar_chunks
from app.runs.files.work_dir.local import RunFile, list_files
from torchyard.contract import RunPaths

log = logging.getLogger(__name__)

MAX_LISTING_BYTES = 64 * 1024 * 1024
# How many of the files left out over the cap the note names.
NAMED_LEFT_OUT = 20


def store(store: str, *, run_id: int, run_dir: Path, max_bytes: int) -> str | None:
    """Copy the run's working-directory files to ``store`` up to ``max_bytes`` and write their
    listing; returns the note for the run's log (what was copied, what left out), None when
    the directory has no files."""
    work = RunPaths(run_dir).work
    listed = list_files(work)
    if not listed:
        return None
    fs, root = store_fs(store)
    base = run_files_key(root, run_id)
    stored: list[dict[str, object]] = []
    left_out: list[str] = []
    total = 0
    for item in listed:
        if total + item.size_bytes > max_bytes:
            left_out.append(item.path)
            continue
        try:
            fd, _info = open_in(work, item.path)
        except (FileRefused, FileNotFoundError):
            continue  # replaced since the listing
        key = f"{base}/{item.path}"
        try:
            fs.makedirs(posixpath.dirname(key), exist_ok=True)
            with os.fdopen(fd, "rb") as src, fs.open(key, "wb") as dst:
                while block := src.read(CHUNK):
                    dst.write(block)
        except OSError:
            log.exception("run %s: could not store %s", run_id, item.path)
            continue
        total += item.size_bytes
        stored.append(
            {
                "path": item.path,
                "size_bytes": item.size_bytes,
                "modified_at": item.modified_at.isoformat(),
                "checkpoint": item.checkpoint,
            }
        )
    with fs.open(f"{base}.json", "w") as out:
        json.dump(stored, out)
    note = f"{len(stored)} files of the run's working directory ({total} bytes) copied"
    note += " to the artifact store"
    if left_out:
        note += f"; {len(left_out)} left out over the cap of {max_bytes} bytes: "
        note += ", ".join(left_out[:NAMED_LEFT_OUT])
        note += " ..." if len(left_out) > NAMED_LEFT_OUT else ""
    return note


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
