"""While a job trains and right after: forward its metrics, keep the run (and its leases)
alive, stop it on a cancel or a worker shutdown, then drain what is left of the spool.

Everything here repeats safely and rides out a database that is away for a while: the job
never waits for the database (the spool keeps its points), and the final drain retries for
up to DB_RETRY_SECONDS so a PostgreSQL restart loses nothing.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from app.db import session_scope
from app.runs import lifecycle, notices
from app.runs.models import Run
from app.settings import get_settings
from app.sweeps import early_stop
from worker import artifacts, provenance
from worker.forwarder import forward
from worker.process import JobProcess
from worker.system_metrics import SystemSeries

log = logging.getLogger(__name__)

# Set when the worker begins a warm shutdown: running jobs are left to train on for the next
# worker (keep_jobs_on_worker_stop), or get shutdown_grace_seconds to end, then are stopped,
# and their runs requeued (max_restarts) or failed with the reason.
SHUTTING_DOWN = threading.Event()


class StopReason(enum.Enum):
    """Why the watch loop stopped a job that had not ended by itself."""

    CANCEL = "cancel"  # the run's cancel was requested
    SHUTDOWN = "shutdown"  # the worker shuts down and the grace period is over
    DETACH = "detach"  # the worker stops and leaves the job to the next one (it trains on)


@dataclass(frozen=True)
class Watched:
    """The run attempt a worker trains: whose heartbeat it stamps, whose leases it renews."""

    run_id: int
    attempt: int
    metrics_path: Path
    has_leases: bool
    # A sweep's trial: judged by the sweep's early-stopping rule as its points arrive.
    in_sweep: bool = False

    def heartbeat(self, session: Session) -> bool:
        return lifecycle.heartbeat(
            session, run_id=self.run_id, attempt=self.attempt, renew_leases=self.has_leases
        )


class Backoff:
    """The forwarding loop's pace: the normal interval, doubling (to 5 s) while the database
    is away, back to normal after the first success."""

    MAX_DELAY = 5.0

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.delay = interval

    def failed(self) -> None:
        self.delay = min(self.MAX_DELAY, max(self.delay * 2, 0.2))

    def succeeded(self) -> None:
        self.delay = self.interval


def watch(run: Watched, job: JobProcess, *, interval: float, grace: float) -> StopReason | None:
    """Forward metrics while the job runs; stop it on a cancel request or a worker shutdown.

    Returns what stopped it, or None when the job ended by itself.
    """
    settings = get_settings()
    # Often enough that a lease never nears its expiry, rarely enough to spare SQLite's lock.
    heartbeat_every = min(settings.lease_ttl_seconds / 5, settings.run_heartbeat_seconds)
    last_heartbeat = time.monotonic()
    recorded = False
    shutdown_deadline: float | None = None
    backoff = Backoff(interval)
    ingest = Ingest(run)
    system = SystemSeries(run.run_id, interval=settings.system_metrics_interval_seconds)
    stopped_early = False  # kept: the cancel check may miss a round (the database away)
    while job.poll() is None:
        time.sleep(backoff.delay)
        if system.due():  # the job's CPU, memory and GPUs, written by the worker (not spooled)
            ingest.step("system series", lambda s: system.record(s, job.members()), 0)
        if not recorded:
            recorded = ingest.step(
                "record the environment",
                lambda s: provenance.merge_job_record(
                    s, run_id=run.run_id, run_dir=run.metrics_path.parent
                ),
                default=False,
            )
        moved = ingest.step(
            "forward", lambda s: forward(s, run_id=run.run_id, metrics_path=run.metrics_path), 0
        )
        if moved and run.in_sweep and not stopped_early:
            # Its own transaction, committed before the cancel check below sees the request.
            stopped_early = early_stop_requested(ingest, run.run_id)
        # Its own transaction: whatever ingestion does, the run heartbeats and sees a cancel.
        try:
            with session_scope() as session:
                if time.monotonic() - last_heartbeat >= heartbeat_every:
                    run.heartbeat(session)
                    last_heartbeat = time.monotonic()
                row = session.get(Run, run.run_id)
                cancel = row is None or row.cancel_requested
        except Exception as exc:  # the database may be briefly away; the spool keeps everything
            backoff.failed()
            log.warning(
                "run %s: heartbeat failed (%s); retry in %.1f s", run.run_id, exc, backoff.delay
            )
            continue
        backoff.succeeded()
        if cancel:
            log.info("run %s: cancel requested, stopping its processes", run.run_id)
            # A trial stopped early is discarded (its points are stored already): killed at
            # once, so its GPUs are free within moments of the decision, not after a grace.
            job.stop(0.0 if stopped_early else grace)
            return StopReason.CANCEL
        if SHUTTING_DOWN.is_set():
            if settings.keep_jobs_on_worker_stop:
                return StopReason.DETACH
            if shutdown_deadline is None:
                shutdown_deadline = time.monotonic() + settings.shutdown_grace_seconds
                log.warning(
                    "run %s: worker shutting down; the job has %.0f s to finish",
                    run.run_id,
                    settings.shutdown_grace_seconds,
                )
            elif time.monotonic() >= shutdown_deadline:
                log.warning("run %s: shutdown grace over, stopping its processes", run.run_id)
                job.stop(grace)
                return StopReason.SHUTDOWN
    return None


def early_stop_requested(ingest: Ingest, run_id: int) -> bool:
    """Judge a sweep's trial by its sweep's early-stopping rule (app.sweeps.early_stop): True
    when it was just stopped (its cancel requested, the reason said on the run)."""
    return ingest.step("early stop", lambda s: early_stop.check(s, run_id=run_id), None) is not None


# How long the final drain waits for a checkpoint upload before it heartbeats again.
UPLOAD_WAIT_SECONDS = 0.25


def drain(run: Watched) -> None:
    """Move what is left of the spool. The run keeps its GPUs until its final status releases
    them, so its leases (and the run's own heartbeat) are kept fresh here too: a long drain
    must not let them expire and hand the GPUs to the next run while this one is not finished
    yet. A database that is away for a while (a PostgreSQL restart) is waited for; any other
    error ends the drain with a note on the run, and the run still gets its final status."""
    ingest = Ingest(run)
    ingest.step(
        "record the environment",
        lambda s: provenance.merge_job_record(
            s, run_id=run.run_id, run_dir=run.metrics_path.parent
        ),
        default=False,
    )

    def one_batch(session: Session) -> int:
        run.heartbeat(session)
        return forward(session, run_id=run.run_id, metrics_path=run.metrics_path, final=True)

    for _ in range(10_000):
        if artifacts.uploading(run.run_id):
            # A moment for an upload between batches, so the drain does not spin; outside
            # any transaction, so no lock (on SQLite the one write lock) is held meanwhile.
            artifacts.wait_for_uploads(run.run_id, timeout=UPLOAD_WAIT_SECONDS)
        if not ingest.step("drain", one_batch, 0, retry=True) or not ingest.healthy:
            return


class Ingest:
    """Runs one run's ingestion steps so that no error in them reaches the watch loop: a
    database that is away is retried (the spool keeps everything); anything else (a bug, a
    row the database refuses) is logged, said once on the run (app.runs.notices), and the
    step answers ``default``, and is tried again only RETRY_AFTER_ERROR later. The run keeps
    heartbeating and can still be cancelled."""

    RETRY_AFTER_ERROR = 5.0

    def __init__(self, run: Watched) -> None:
        self.run = run
        self.healthy = True
        self._paused_until = 0.0

    def step(
        self, what: str, work: Callable[[Session], T], default: T, *, retry: bool = False
    ) -> T:
        if time.monotonic() < self._paused_until:
            return default
        try:
            if retry:
                return with_db(self.run.run_id, what, work)
            with session_scope() as session:
                return work(session)
        except Exception as exc:
            if _database_away(exc) and not retry:
                log.warning("run %s: %s failed (%s); will retry", self.run.run_id, what, exc)
                return default
            log.exception("run %s: %s failed", self.run.run_id, what)
            self.healthy = False
            self._paused_until = time.monotonic() + self.RETRY_AFTER_ERROR
            # The first line only: SQLAlchemy adds the statement and its parameters below it.
            first = (str(exc).splitlines() or [""])[0]
            self._note(f"{what}: {type(exc).__name__}: {first}")
            return default

    def _note(self, error: str) -> None:
        try:
            with session_scope() as session:
                row = session.get(Run, self.run.run_id)
                if row is not None:
                    notices.ingest_error(row, error)
        except Exception:
            log.exception("run %s: could not note the ingestion error", self.run.run_id)


def _database_away(exc: BaseException) -> bool:
    """The database cannot be reached right now (a restart, SQLite's lock held too long):
    worth waiting for, unlike an error in what was sent."""
    return isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


DB_RETRY_SECONDS = 300.0
T = TypeVar("T")


def with_db(run_id: int, what: str, work: Callable[[Session], T]) -> T:
    """One unit of work, tried again with backoff while the database is unreachable (up to
    DB_RETRY_SECONDS): a finished job's last points and status must not be lost to a database
    restart. ``work`` must be safe to repeat (forward() and the lifecycle's guarded
    transitions are)."""
    backoff = Backoff(0.2)
    deadline = time.monotonic() + DB_RETRY_SECONDS
    while True:
        try:
            with session_scope() as session:
                return work(session)
        except DBAPIError as exc:
            if not _database_away(exc) or time.monotonic() > deadline:
                raise
            backoff.failed()
            log.warning("run %s: %s failed (%s); retry in %.1f s", run_id, what, exc, backoff.delay)
            time.sleep(backoff.delay)
