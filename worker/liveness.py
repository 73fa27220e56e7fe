"""Finding runs whose worker went away, from any process: every worker and the API run it.

The decision is app.runs.recovery's; this adds what needs the run's files: before a lost run
is failed or requeued, whatever its job left in the spool is moved to the database when the
run directory is on this machine's disk (the worker of that host after a restart, or the API
of a one-box deployment), so every point that reached the file is kept.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session

from app.db import session_scope
from app.runs.recovery import Handover, reap_lost_runs
from app.settings import get_settings
from torchyard.contract import METRICS_FILE
from worker.forwarder import forward

log = logging.getLogger(__name__)

MAX_SALVAGE_BATCHES = 10_000


def salvage_spool(session: Session, run_id: int) -> None:
    """Move the rest of a run's local spool (if this machine has it) in the caller's
    transaction."""
    metrics_path = get_settings().run_dir(run_id) / METRICS_FILE
    if not metrics_path.parent.is_dir():
        return
    for _ in range(MAX_SALVAGE_BATCHES):
        if not forward(session, run_id=run_id, metrics_path=metrics_path):
            return


def reap_once() -> list[Handover]:
    settings = get_settings()
    with session_scope() as session:
        return reap_lost_runs(
            session, lost_after_seconds=settings.run_lost_seconds, salvage=salvage_spool
        )


def reap_forever(stop: threading.Event) -> None:
    """The reaper loop (a daemon thread in the worker, a thread in the API's lifespan)."""
    interval = get_settings().reap_interval_seconds
    if interval <= 0:
        return
    while not stop.wait(interval):
        try:
            reap_once()
        except Exception:  # the database may be away for a moment; the next round retries
            log.exception("looking for lost runs failed; will retry")
