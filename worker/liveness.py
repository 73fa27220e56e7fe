"""What this host knows about its own jobs, for the reaper (app.runs.state.reaper).

The reaper's decision is the server's, over the database (app.runs.state.recovery); this adds what
needs the run's files and the keeper's records: before a lost run is failed or requeued,
whatever its job left in the spool is moved to the database when the run directory is on this
machine's disk (the worker of that host after a restart, or the API of a one-box deployment,
torchyard/compose/api.py), so every point that reached the file is kept. ``HostJobs`` is handed
to the reaper with ``app.runs.state.reaper.use_local_jobs``.
"""

from __future__ import annotations

import logging

from app.db import Session
from app.runs.nodes import holds_node_0
from app.runs.state import notices
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import job_records
from worker.forwarder import forward
from worker.gpus import host_name
from worker.job_errors import run_error

log = logging.getLogger(__name__)

MAX_SALVAGE_BATCHES = 10_000


def salvage_spool(session: Session, run_id: int) -> None:
    """Move the rest of a run's local spool (if this machine has it) in the caller's
    transaction."""
    settings = get_settings()
    metrics_path = RunPaths(settings.run_dir(run_id)).metrics
    if not metrics_path.parent.is_dir():
        return
    if not holds_node_0(session, run_id=run_id, host=host_name(settings)):
        return  # another node's folder: its spool and log are not the run's (worker.forwarder)
    # In a savepoint: an error in one run's spool is that run's (its points so far are kept,
    # the rest noted on it); the reaper still hands it over, and every other lost run too.
    try:
        for _ in range(MAX_SALVAGE_BATCHES):
            with session.begin_nested():
                moved = forward(session, run_id=run_id, metrics_path=metrics_path)
            if not moved:
                return
    except Exception as exc:
        log.exception("run %s: salvaging its spool failed", run_id)
        first = (str(exc).splitlines() or [""])[0]  # not the statement SQLAlchemy adds
        notices.note_ingest_error(
            session, run_id=run_id, error=f"salvage: {type(exc).__name__}: {first}"
        )


def still_training(run_id: int) -> bool:
    """The run's job still trains on this machine (its keeper is the one its worker
    recorded): its worker stopped, but the job is not lost. The host's next worker re-adopts
    it (worker.adoption), however long the upgrade takes; until then the run stays running."""
    record = job_records.find(run_id, host_name(get_settings()))
    return record is not None and record.alive()


def ended_unwatched(run_id: int) -> tuple[int, str | None] | None:
    """(exit status, error) of the run's job when it ended on this machine while no worker
    watched it (its keeper wrote the status), e.g. during an upgrade longer than
    run_lost_seconds; the spool is moved first (salvage_spool)."""
    settings = get_settings()
    record = job_records.find(run_id, host_name(settings))
    if record is None or record.alive():
        return None
    code = record.exit_code()
    if code is None:
        return None
    run_dir = settings.run_dir(run_id)
    record.remove()
    return code, run_error(run_dir, RunPaths(run_dir).log, code) if code else None


class HostJobs:
    """This machine's jobs as app.runs.state.reaper.LocalJobs sees them."""

    def salvage(self, session: Session, run_id: int) -> None:
        salvage_spool(session, run_id)

    def still_training(self, run_id: int) -> bool:
        return still_training(run_id)

    def ended_unwatched(self, run_id: int) -> tuple[int, str | None] | None:
        return ended_unwatched(run_id)
