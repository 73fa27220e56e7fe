"""While a job trains and right after: the supervision loop over it (worker.supervision) with
the steps a job needs, then the drain of what is left of its spool.

Everything here repeats safely and rides out a database that is away for a while: the job
never waits for the database (the spool keeps its points), and the final drain retries for
up to DB_RETRY_SECONDS so a PostgreSQL restart loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from app.db import Session
from app.settings import get_settings
from worker import artifacts, gpus, provenance
from worker.forwarder import forward
from worker.heartbeat import Watched
from worker.ingest_gate import Turn
from worker.ingest_steps import IngestSteps
from worker.limits import Guard
from worker.process import JobProcess
from worker.supervision import JobTarget, Policy, Step, StopReason, supervise
from worker.supervision_steps import (
    CheckIn,
    EarlyStop,
    Forward,
    Limits,
    RecordEnvironment,
    System,
)

log = logging.getLogger(__name__)


def limits_guard(run: Watched) -> Guard | None:
    """The guard of the attempt's job against its limits; None for an attempt started without
    them (an older worker's record)."""
    if run.limits is None:
        return None
    interval = get_settings().disk_check_interval_seconds
    return Guard(run.limits, run.metrics_path.parent, disk_interval=interval)


def watch(
    run: Watched,
    job: JobProcess,
    *,
    interval: float,
    grace: float,
    guard: Guard | None = None,
    on_hit: Callable[[str], None] | None = None,
    extra: Sequence[Step] = (),
) -> StopReason | None:
    """The supervision loop (worker.supervision) over a job, on a single host or any node of
    a multi-node run: forward its metrics (node k: its log), its system series, its limits
    (``guard``: a fork bomb held at pids.max, or a job that caught the OOM kill of one rank,
    would otherwise sit there to the end of time), a sweep's early stop, then the check-in.
    ``extra`` steps go before the check-in (node k's early failure record).

    Returns what stopped it, or None when the job ended by itself.
    """
    settings = get_settings()
    ingest = IngestSteps(run.run_id)
    batches = Forward(ingest, run, turn=Turn.LIVE, mark=True)
    steps: list[Step] = []
    if guard is not None:
        steps.append(Limits(guard, job, on_hit))
    steps.append(System(ingest, run, job, gpus.host_name(settings)))
    if not run.node:  # the environment record is node 0's (its job's rank 0 writes it)
        steps.append(RecordEnvironment(ingest, run))
    steps.append(batches)
    if run.in_sweep and not run.node:
        steps.append(EarlyStop(ingest, run, batches))
    steps += [*extra, CheckIn(run)]
    policy = Policy(
        cancel_grace=grace,
        detach=settings.keep_jobs_on_worker_stop,
        shutdown_grace=settings.shutdown_grace_seconds,
    )
    what = f"run {run.run_id}" + (f" node {run.node}" if run.node else "") + "'s job"
    return supervise(what, JobTarget(job), steps, policy, interval=interval)


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
