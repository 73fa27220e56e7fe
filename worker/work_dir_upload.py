"""A run's working-directory files to the artifact store when it ends, while its heartbeat
stays fresh. What is copied and listed, and how, is app.runs.files.work_dir.store's; the worker runs
it in a thread (a large upload must not make the reaper take the run for lost before its
final status: the supervision loop keeps it alive meanwhile) and says in the run's log what was
stored.
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.runs.files.work_dir import store as work_dir_store
from worker.heartbeat import Watched
from worker.run_log import note_in_log
from worker.supervision import while_supervised
from worker.supervision_steps import CheckIn

log = logging.getLogger(__name__)


def store_run_files(store: str, *, run_id: int, run_dir: Path, max_bytes: int) -> None:
    """Copy the files, then note in the run's log what was copied and what left out."""
    note = work_dir_store.store(store, run_id=run_id, run_dir=run_dir, max_bytes=max_bytes)
    if note is not None:
        note_in_log(run_dir, note)


def store_while_heartbeating(store: str, run: Watched, *, run_dir: Path, max_bytes: int) -> None:
    """``store_run_files`` in a thread under the supervision loop (worker.supervision): the
    run's heartbeat (and leases) stay fresh. The job has ended already: what the check-in
    answers meanwhile changes nothing here (the final status is written guarded)."""

    def work() -> None:
        try:
            store_run_files(store, run_id=run.run_id, run_dir=run_dir, max_bytes=max_bytes)
        except Exception:
            log.exception("run %s: storing its files failed", run.run_id)

    while_supervised(run, work, [CheckIn(run)])
