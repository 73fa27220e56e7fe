"""Checkpoints to and from the shared artifact store (app.artifacts), on the worker.

Upload: the forwarder calls ``sync`` in each of its units of work. It records the URI of every
upload that has finished since the last call (through app.runs.files.checkpoint_records, the rows'
owner), and hands the run's checkpoints that have no URI yet to a small pool of upload
threads. So no transaction ever waits on an upload, and the
watch loop keeps heartbeating leases and checking for a cancel while a large file moves. In
the final drain ``sync`` also counts the uploads still in flight, and the drain goes on until
there are none: a run's final status is written only after its checkpoints are in the store.
A file that cannot be uploaded (gone, or MAX_ATTEMPTS failures) is logged and left without a
URI; the run still finishes.

Fetch: ``ensure_local`` gives a resumed run's worker the checkpoint it starts from, from the
store when this host does not have it.
"""

from __future__ import annotations

import logging
import os
import posixpath
import secrets
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from app.artifacts import checkpoint_key, renames_atomically, store_fs
from app.db import Session, session_scope
from app.runs.files import checkpoint_records
from app.runs.files.job_files import FileRefused, clean_relative, is_regular, open_job_file
from app.settings import get_settings

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
UPLOAD_THREADS = 2


class ArtifactMissing(RuntimeError):
    pass


def upload(store: str, local: Path, *, run_id: int, name: str) -> str:
    """Copy ``local`` to the store as run ``run_id``'s checkpoint ``name``; returns its URI."""
    fs, root = store_fs(store)
    key = checkpoint_key(root, run_id, name)
    # The job wrote it: opened as a regular file without following a link (a link to the
    # database must not end up in the store), and copied from that descriptor.
    with open_job_file(local) as source:
        if not renames_atomically(fs):
            _copy(source, fs, key)
            return str(fs.unstrip_protocol(key))
        parent = posixpath.dirname(key)
        fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{name}.{secrets.token_hex(4)}.part"
        try:
            _copy(source, fs, tmp)
            fs.mv(tmp, key)
        except BaseException:
            if fs.exists(tmp):
                fs.rm_file(tmp)
            raise
    return str(fs.unstrip_protocol(key))


def _copy(source: BinaryIO, fs: AbstractFileSystem, key: str) -> None:
    with fs.open(key, "wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)


def fetch(uri: str, target: Path) -> None:
    """Download ``uri`` to ``target`` through a temp file in the same directory, so a reader
    never sees half a checkpoint."""
    from fsspec import url_to_fs

    fs, path = url_to_fs(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
    try:
        fs.get_file(path, str(tmp))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def ensure_local(runs_dir: Path, resume_from: str | None) -> Path | None:
    """The checkpoint a resumed run starts from (``runs.resume_from``, relative to the runs
    dir), on this host's disk: fetched from the store to the same relative path if missing."""
    if not resume_from:
        return None
    try:
        target = runs_dir / clean_relative(resume_from)
    except FileRefused:
        raise ArtifactMissing(
            f"resume_from {resume_from!r} is not under the runs directory"
        ) from None
    if is_regular(runs_dir, resume_from):
        return target
    run_part, _, relative = resume_from.partition("/")
    with session_scope() as session:
        uri = checkpoint_records.stored_uri(session, run_id=int(run_part), path=relative)
    if not uri:
        raise ArtifactMissing(
            f"checkpoint {resume_from!r} is neither on this host nor in the artifact store"
        )
    log.info("fetching %s from the artifact store to %s", uri, target)
    fetch(uri, target)
    return target


class _Uploads:
    """This worker process's uploads in flight, by (run id, checkpoint name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.in_flight: dict[tuple[int, str], Future[str]] = {}
        self.failures: dict[tuple[int, str], int] = {}
        self.given_up: set[tuple[int, str]] = set()

    def submit(self, key: tuple[int, str], store: str, local: Path) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="upload")
            self.in_flight[key] = self._pool.submit(
                upload, store, local, run_id=key[0], name=key[1]
            )

    def of_run(self, run_id: int) -> dict[tuple[int, str], Future[str]]:
        with self._lock:
            return {k: f for k, f in self.in_flight.items() if k[0] == run_id}

    def pop(self, key: tuple[int, str]) -> None:
        with self._lock:
            self.in_flight.pop(key, None)

    def failed(self, key: tuple[int, str], exc: BaseException) -> None:
        with self._lock:
            attempts = self.failures[key] = self.failures.get(key, 0) + 1
            if isinstance(exc, FileNotFoundError) or attempts >= MAX_ATTEMPTS:
                self.given_up.add(key)
                log.error("run %s: checkpoint %s not uploaded, giving up: %r", *key, exc)
            else:
                log.warning("run %s: uploading checkpoint %s failed (%r); will retry", *key, exc)

    def forget_run(self, run_id: int) -> None:
        with self._lock:
            self.failures = {k: n for k, n in self.failures.items() if k[0] != run_id}
            self.given_up = {k for k in self.given_up if k[0] != run_id}


_uploads = _Uploads()


def uploading(run_id: int) -> bool:
    return bool(_uploads.of_run(run_id))


def wait_for_uploads(run_id: int, *, timeout: float) -> None:
    """Block up to ``timeout`` until one of the run's uploads finishes (none: return now)."""
    pending = _uploads.of_run(run_id).values()
    if pending:
        wait_futures(pending, timeout=timeout, return_when="FIRST_COMPLETED")


def sync(session: Session, *, run_id: int, run_dir: Path, final: bool) -> int:
    """Record finished uploads, start the missing ones; returns the URIs recorded, plus the
    uploads still in flight when ``final``."""
    store = get_settings().artifact_store
    if not store:
        return 0
    recorded = 0
    for key, future in _uploads.of_run(run_id).items():
        if not future.done():
            continue
        _uploads.pop(key)
        try:
            uri = future.result()
        except Exception as exc:
            _uploads.failed(key, exc)
            continue
        checkpoint_records.record_upload(session, run_id=run_id, name=key[1], uri=uri, store=store)
        recorded += 1
    waiting = checkpoint_records.awaiting_upload(session, run_id=run_id)
    busy = _uploads.of_run(run_id)
    for name, path in waiting:
        key = (run_id, name)
        if key in busy or key in _uploads.given_up:
            continue
        if not is_regular(run_dir, path):
            _uploads.failed(key, FileNotFoundError(f"{path} is not in {run_dir}"))
            continue
        _uploads.submit(key, store, run_dir / clean_relative(path))
    if not final:
        return recorded
    in_flight = len(_uploads.of_run(run_id))
    if not in_flight:
        _uploads.forget_run(run_id)
    return recorded + in_flight
