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

from app.db import Session
from app.runs.lifecycle import Standing
from app.settings import get_settings
from app.sweeps import early_stop
from worker import artifacts, gpus, ingest_mark, provenance
from worker.backoff import Backoff
from worker.forwarder import Moved, forward
from worker.heartbeat import Heartbeat, Watched, stops_as_cancelled
from worker.ingest_gate import Turn
from worker.ingest_steps import IngestSteps
from worker.limits import Guard
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
    FENCED = "fenced"  # the run is no longer this attempt's (reaped while the worker stalled)
    LIMIT = "limit"  # the job hit one of its run's limits (worker.limits): memory, processes, disk


def watch(
    run: Watched,
    job: JobProcess,
    *,
    interval: float,
    grace: float,
    guard: Guard | None = None,
) -> StopReason | None:
    """Forward metrics while the job runs; stop it on a cancel request or a worker shutdown,
    and at once (no grace: the GPUs may be another attempt's now) when the server answers that
    the run is no longer this attempt's. A job past one of its limits (``guard``) is stopped
    too: a fork bomb held at pids.max, or a job that caught the OOM kill of one rank, would
    otherwise sit there to the end of time.

    Returns what stopped it, or None when the job ended by itself.
    """
    settings = get_settings()
    recorded = bool(run.node)  # the environment record is node 0's (its job's rank 0 writes it)
    shutdown_deadline: float | None = None
    backoff = Backoff(interval)
    heartbeat = Heartbeat(run)
    ingest = IngestSteps(run.run_id)
    system = SystemSeries(
        run.run_id,
        interval=settings.system_metrics_interval_seconds,
        node=run.node or 0,
        host=gpus.host_name(settings),
    )
    stopped_early = False  # kept: the cancel check may miss a round (the database away)
    moved = Moved(0)
    ingested: int | None = None  # the spool's committed offset, as last told to the job
    while job.poll() is None:
        if not moved.more:  # a backlog goes on at once: its turn at the gate is its pause
            time.sleep(backoff.delay)
        hit = guard.check(job) if guard is not None else None
        if hit is not None:
            log.warning("run %s: %s; stopping its processes", run.run_id, hit)
            job.stop(grace)
            return StopReason.LIMIT
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
            "forward",
            lambda s: forward(
                s,
                run_id=run.run_id,
                metrics_path=run.metrics_path,
                attempt=run.attempt,
                node=run.node or 0,
            ),
            Moved(0),
            turn=Turn.LIVE,
        )
        # Committed (an empty batch too): tell the job, whose reporter holds back while far
        # ahead of it; again after a wait at the gate (this worker is alive, only busy with
        # other runs' turns). Not after a failed or refused batch, nor while the database is
        # away: the mark then goes stale, and the job spools freely, as without a worker.
        ingested = ingested if moved.offset is None else moved.offset
        if ingested is not None and (moved.offset is not None or ingest.no_turn):
            ingest_mark.publish(
                run.metrics_path,
                ingested,
                ingest_mark.share(settings.spool_backlog_bytes, run.metrics_path),
            )
        if moved and run.in_sweep and not stopped_early:
            # Its own transaction, committed before the cancel check below sees the request.
            stopped_early = early_stop_requested(ingest, run.run_id)
        # Its own transaction: whatever ingestion does, the run heartbeats and sees a cancel.
        standing = heartbeat.check()
        if standing is None:  # the database may be briefly away; the spool keeps everything
            backoff.failed()
            continue
        backoff.succeeded()
        if standing is Standing.NOT_OWNED and job.poll() is not None:
            return None  # it ended by itself (while the worker stalled): its exit status speaks
        if standing is Standing.NOT_OWNED:  # handed over under us: the server's word is final
            log.warning(
                "run %s: attempt %s was handed over; stopping its job", run.run_id, run.attempt
            )
            job.stop(0.0)
            return StopReason.FENCED
        if stops_as_cancelled(standing):
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


def early_stop_requested(ingest: IngestSteps, run_id: int) -> bool:
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
    ingest = IngestSteps(run.run_id)
    if not run.node:  # node 0's, as in watch()
        ingest.step(
            "record the environment",
            lambda s: provenance.merge_job_record(
                s, run_id=run.run_id, run_dir=run.metrics_path.parent
            ),
            default=False,
        )

    def one_batch(session: Session) -> int:
        run.heartbeat(session)
        return forward(
            session,
            run_id=run.run_id,
            metrics_path=run.metrics_path,
            final=True,
            attempt=run.attempt,
            node=run.node or 0,
        )

    # Batches of forward_batch_bytes: a bound of 1M batches is a spool of a terabyte.
    for _ in range(1_000_000):
        if artifacts.uploading(run.run_id):
            # A moment for an upload between batches, so the drain does not spin; outside
            # any transaction, so no lock (on SQLite the one write lock) is held meanwhile.
            artifacts.wait_for_uploads(run.run_id, timeout=UPLOAD_WAIT_SECONDS)
        # Before the runs still training (worker.ingest_gate): an ended job's run finishes
        # within moments of its end, whatever backlog the others have.
        moved = ingest.step("drain", one_batch, 0, retry=True, turn=Turn.ENDING)
        if not moved or not ingest.healthy:
            return
