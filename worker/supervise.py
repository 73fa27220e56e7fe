"""A spawned job from then on, whichever worker launched it: watch it, drain its spool, store
its files, write its final status. worker.runner calls it right after the spawn; a worker
that re-adopts a job left running by the previous one (worker.adoption) calls it too, so a
re-adopted run ends exactly as one that was never left.

When the worker stops while the job trains, the job is detached (left running, its run still
"running" as the same attempt, its leases kept) unless `keep_jobs_on_worker_stop` is off.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from app.db import Session
from app.runs.files.disk import record_disk_use
from app.runs.state import lifecycle
from app.runs.state.recovery import HandoverOutcome, hand_over_attempt
from app.runs.state.status import RunStatus
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import held_gpus, job_records, node_run
from worker.db_retry import with_db
from worker.heartbeat import Watched
from worker.job_errors import run_error
from worker.limits import release
from worker.node_run import NodeRole
from worker.process import JobProcess
from worker.run_log import note_in_log
from worker.supervision import StopReason
from worker.watch import drain, limits_guard, watch
from worker.work_dir_upload import store_while_heartbeating

log = logging.getLogger(__name__)

WORKER_SHUTDOWN_REASON = "the worker shut down while the run was training"


def remember(job: JobProcess, run: Watched, *, host: str, nodes: int = 1) -> None:
    """The job's record for the next worker on this host (worker.job_records), written as soon
    as the keeper runs, and its pid on the run. A multi-node run's node k > 0 (``run.node``,
    of ``nodes``) is recorded as that node's; the run's pid stays node 0's."""
    start = job.start_ticks()
    if start is not None:
        job_records.JobRecord(
            run_id=run.run_id,
            attempt=run.attempt,
            host=host,
            boot_id=job_records.boot_id(),
            keeper_pid=job.pid,
            keeper_start=start,
            token=job.token,
            sandboxed=job.sandboxed,
            limits=asdict(run.limits) if run.limits is not None else None,
            node=run.node or 0,
            nodes=nodes,
            gpus=run.gpus,
        ).save()
    if run.node:
        return
    # Tried again while the database is away: this runs inside the job's block, where an error
    # stops the job (a connection ended by PostgreSQL under a frozen worker stopped healthy
    # jobs, and left one that had exited 0 meanwhile failed "worker lost").
    with_db(
        run.run_id,
        "record the pid",
        lambda s: lifecycle.record_pid(s, run_id=run.run_id, attempt=run.attempt, pid=job.pid),
    )


def supervise(run: Watched, job: JobProcess) -> RunStatus:
    """From a running job to the run's final status (RunStatus.running: the job was left to
    the next worker). Used inside the job's block (`with job:`)."""
    settings = get_settings()
    run_dir = run.metrics_path.parent
    log_path = RunPaths(run_dir).log
    guard = limits_guard(run)
    with held_gpus.holding(run.run_id, run.attempt, run.gpus, job.pid):
        stopped_by = watch(
            run,
            job,
            interval=settings.forwarder_interval_seconds,
            grace=settings.cancel_grace_seconds,
            guard=guard,
        )
        if stopped_by is StopReason.FENCED:  # its GPUs count as free only once it is gone
            code = job.wait()
    if stopped_by is StopReason.FENCED:
        release(run.limits)
        return fenced(run, run_dir, code)
    if stopped_by is StopReason.DETACH:
        job.detach()
        log.warning(
            "run %s: the worker stops; its job (keeper pid %s) trains on for the next worker",
            run.run_id,
            job.pid,
        )
        return RunStatus.running
    code = job.wait()
    hit = guard.verdict(code) if guard is not None else None
    release(run.limits)  # the job has ended: its cgroup goes
    if stopped_by is StopReason.CANCEL:
        # Said in the run's own log (shipped by the drain): the job itself saw only a SIGTERM.
        note_in_log(run_dir, "the run was cancelled; every process of it stopped")
    drain(run)
    # The API reads the run's files from the store: node 0's (global rank 0's host, where the
    # checkpoints are); a multi-node run's node k > 0 stores nothing there (docs/multi-node.md).
    if settings.artifact_store and not run.node:
        store_while_heartbeating(
            settings.artifact_store,
            run,
            run_dir=run_dir,
            max_bytes=settings.run_files_store_max_bytes,
        )
        drain(run)  # ships the log line that says what was stored
    with_db(run.run_id, "disk use", lambda s: record_disk_use(s, run_id=run.run_id, folder=run_dir))
    attempt = run.attempt
    if stopped_by is StopReason.CANCEL:
        status = finish(run.run_id, RunStatus.cancelled, code, None, attempt=attempt)
    elif stopped_by is StopReason.SHUTDOWN:
        status = hand_over_stopped(run.run_id, attempt=attempt, reason=WORKER_SHUTDOWN_REASON)
    elif code == 0 and stopped_by is not StopReason.LIMIT:
        if run.node == 0:  # a multi-node run ends once each node's log is whole
            node_run.await_peers(run)
        status = finish(run.run_id, RunStatus.succeeded, code, None, attempt=attempt)
    else:
        error = run_error(run_dir, log_path, code)
        if hit is not None:  # the limit first: the job's own last words follow
            error = f"{hit}\n\n{error}"
        if run.node is not None and hit is None:  # node 0 of a multi-node run: fails as one
            failure = node_run.node_failure((RunPaths(run_dir), code), run.node)
            status = node_run.fail_as_one(run, run.node, code, failure)
        else:
            status = finish(run.run_id, RunStatus.failed, code, error, attempt=attempt)
    forget_attempt(run)
    return status


def fenced(run: Watched, run_dir: Path, code: int | None) -> RunStatus:
    """The attempt's job was stopped because the run is no longer this attempt's: nothing
    more of it is stored and the run's status is not this worker's to write. Its record goes
    only while it is still this attempt's (the next one may run on this host already)."""
    note_in_log(run_dir, f"attempt {run.attempt} was handed over; every process of it stopped")
    log.warning("run %s: attempt %s stopped (exit code %s)", run.run_id, run.attempt, code)
    forget_attempt(run)
    return RunStatus.queued


def forget_attempt(run: Watched) -> None:
    job_records.forget_attempt(run.run_id, run.attempt)


def forget(run_id: int) -> None:
    job_records.forget(run_id)


def finish(
    run_id: int, status: RunStatus, code: int | None, error: str | None, *, attempt: int
) -> RunStatus:
    """The final status, written only while the run is still this worker's (running, same
    attempt): a run the reaper already requeued (the worker stalled past run_lost_seconds, or
    a long database outage) is not overwritten. One it failed as "worker lost" is settled as
    the job exited: its exit status is known now, the reaper only guessed. Leases go in the
    same transaction as the status."""

    def write(s: Session) -> bool:
        if lifecycle.finish(
            s, run_id=run_id, attempt=attempt, status=status, exit_code=code, error=error
        ):
            return True
        if status is RunStatus.cancelled or code is None:
            return False
        settled = lifecycle.settle(s, run_id=run_id, attempt=attempt, exit_code=code, error=error)
        if settled:
            log.warning("run %s: failed as worker lost, settled by its job's exit", run_id)
        return settled

    with_db(run_id, "finish", write)
    log.info("run %s %s (exit code %s)", run_id, status.value, code)
    return status


_HANDED_OVER_AS = {
    HandoverOutcome.REQUEUED: RunStatus.queued,
    HandoverOutcome.CANCELLED: RunStatus.cancelled,
}


def hand_over_stopped(
    run_id: int, *, attempt: int, reason: str, requeue_from_checkpoint: bool = False
) -> RunStatus:
    """A run whose job was stopped under it (a worker shutdown without keeping jobs, a host
    that restarted): requeued (max_restarts, or ``requeue_from_checkpoint`` and it has one) or
    failed with the reason."""

    outcome = with_db(
        run_id,
        "hand over",
        lambda s: hand_over_attempt(
            s,
            run_id=run_id,
            attempt=attempt,
            reason=reason,
            requeue_from_checkpoint=requeue_from_checkpoint,
        ),
    )
    log.info("run %s: %s (%s)", run_id, outcome.value, reason)
    return _HANDED_OVER_AS.get(outcome, RunStatus.failed)


def stopped_before_start(run: Watched, stopped: StopReason) -> RunStatus:
    """The supervision loop stopped the run before its job started (during its snapshot's
    unpack, its environment's build, its job base): handed over (nothing more of this attempt
    is written), cancelled, or handed back by a worker shutdown."""
    if stopped is StopReason.FENCED:  # the next attempt's now: nothing more of this
        log.warning("run %s: attempt %s handed over before its job", run.run_id, run.attempt)
        return RunStatus.queued
    drain(run)  # what its log says so far (pip's lines)
    if stopped is StopReason.CANCEL:
        return finish(run.run_id, RunStatus.cancelled, None, None, attempt=run.attempt)
    return hand_over_stopped(run.run_id, attempt=run.attempt, reason=WORKER_SHUTDOWN_REASON)


def not_met(run: Watched, role: NodeRole, why: StopReason | str) -> RunStatus:
    """A node that did not start its job: the run was cancelled or handed over meanwhile, or
    (node 0 says it) a node never joined."""
    if why is StopReason.FENCED:
        return RunStatus.queued
    if role.node > 0:  # node 0's worker writes the run's status
        return RunStatus.cancelled if why is StopReason.CANCEL else RunStatus.failed
    if why is StopReason.CANCEL:
        return finish(run.run_id, RunStatus.cancelled, None, None, attempt=run.attempt)
    return finish(run.run_id, RunStatus.failed, None, str(why), attempt=run.attempt)
