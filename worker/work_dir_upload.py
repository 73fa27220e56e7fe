"""A run's working-directory files to the artifact store when it ends, while its heartbeat
stays fresh. What is copied and listed, and how, is app.runs.work_dir.store's; the worker runs
it in a thread (a large upload must not make the reaper take the run for lost before its
final status) and says in the run's log what was stored.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from app.runs.work_dir import store as work_dir_store
from app.settings import get_settings
from worker.db_retry import with_db
from worker.heartbeat import Watched
from worker.run_log import note_in_log

log = logging.getLogger(__name__)


def store_run_files(store: str, *, run_id: int, run_dir: Path, max_bytes: int) -> None:
    """Copy the files, then note in the run's log what was copied and what left out."""
    note = work_dir_store.store(store, run_id=run_id, run_dir=run_dir, max_bytes=max_bytes)
    if note is not None:
        note_in_log(run_dir, note)


def store_while_heartbeating(store: str, run: Watched, *, run_dir: Path, max_bytes: int) -> None:
    """``store_run_files`` in a thread while the run's heartbeat (and leases) stay fresh."""
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
