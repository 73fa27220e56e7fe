"""A run's working-directory files to the artifact store when it ends, for an API on
another host.

When the worker's data dir is not the API's (``artifact_store`` set), the files a run wrote
in ``<run_dir>/work`` (a script's ``model_best.pt``, a Lightning ``.ckpt``, a Hugging Face
``checkpoint-500/``) would stay on the worker's disk. After the final drain, before the final
status, each is copied to ``<store>/runs/<id>/work/<path>`` in path order until
``run_files_store_max_bytes`` is reached, and the listing of what was stored goes to
``<store>/runs/<id>/work.json``, which the API lists and serves from (app.runs.files). The
files are read through the same fd-checked walk the API uses: the job's directory is hostile
input (no link is followed, no FIFO is opened). What was left out is said in the run's log.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import threading
from pathlib import Path

from app.artifacts import run_files_key, store_fs
from app.runs import files
from app.runs.job_files import FileRefused, open_in
from app.settings import get_settings
from torchyard.contract import WORK_DIR
from worker.run_log import note_in_log
from worker.watch import Watched, with_db

log = logging.getLogger(__name__)


def store_run_files(store: str, *, run_id: int, run_dir: Path, max_bytes: int) -> None:
    work = run_dir / WORK_DIR
    listed = files.list_files(work)
    if not listed:
        return
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
                while block := src.read(files.CHUNK):
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
        note += ", ".join(left_out[:20]) + (" ..." if len(left_out) > 20 else "")
    note_in_log(run_dir, note)


def store_while_heartbeating(store: str, run: Watched, *, run_dir: Path, max_bytes: int) -> None:
    """``store_run_files`` in a thread while the run's heartbeat (and leases) stay fresh: a
    large upload must not make the reaper take the run for lost before its final status."""
    settings = get_settings()
    every = max(0.5, min(settings.lease_ttl_seconds / 5, settings.run_heartbeat_seconds))

    def work() -> None:
        try:
            store_run_files(store, run_id=run.run_id, run_dir=run_dir, max_bytes=max_bytes)
        except Exception:
            log.exception("run %s: storing its files failed", run.run_id)

    thread = threading.Thread(target=work, name=f"run-{run.run_id}-files", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(timeout=every)
        if thread.is_alive():
            with_db(run.run_id, "heartbeat", run.heartbeat)
