"""Every change of a run's status and the columns that go with it (docs/architecture.md).

    queued --start--> running --finish--> succeeded | failed | cancelled
      |                 |  \\--requeue--> queued (the next attempt)
      |                 \\--fail--> failed (worker lost, worker error) --settle--> as its job exited
      \\--cancel--> cancelled       running --cancel--> cancel_requested, then the worker
                                   stops the job and finishes it cancelled

A run logged from outside (``origin``, app/mlflow: no worker) is born running, its client ends
it (open/end/reopen_external), and a cancel ends it at once, since no worker would. A run of
a Slurm pool runs from its worker's claim; its attempt is then `hand_over`ed to its Slurm job.

Each transition is one conditional UPDATE naming the state it expects (the status; for a
running run, its attempt) that says whether it took effect: of two actors racing for one run
one wins, and the loser leaves the run alone. The GPU leases go in the final status's
transaction. Functions take the caller's session and flush, never commit."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, Update, func, or_, select, update
from sqlalchemy.orm import Session

from app.db import after_commit
from app.gpus.leases import heartbeat_leases, release_leases
from app.gpus.pools import pool_of
from app.runs.models import Run, RunStatus
from app.runs.query.params import record_config
from app.runs.state.answers import WORKER_LOST, CancelOutcome, Standing
from app.runs.state.dispatch import enqueue_run, next_message, run_pool
from app.runs.state.ended import run_ended_with
from app.timeutil import utcnow

log = logging.getLogger(__name__)
# What a job of the run sets while it runs, cleared when an attempt starts or is requeued.
_NO_JOB = dict.fromkeys(("pid", "env_build_started_at", "env_build_line", "training_started_at"))


def took_effect(session: Session, stmt: Update) -> bool:
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    return bool(result.rowcount)


def running_as(run_id: int, attempt: int) -> Update:
    """An UPDATE of the run only while it is running as `attempt`: still this worker's."""
    return update(Run).where(
        Run.id == run_id, Run.status == RunStatus.running, Run.attempt == attempt
    )


def _lost(run_id: int, attempt: int) -> Update:
    """An UPDATE of the run only while a reaper failed it as `attempt` for a lost worker (no
    exit status): no other attempt will run, so the attempt's own worker still speaks for it."""
    return update(Run).where(
        Run.id == run_id,
        Run.status == RunStatus.failed,
        Run.attempt == attempt,
        Run.exit_code.is_(None),
        Run.error.startswith(WORKER_LOST),
    )


def claim_stale(session: Session, *, run_id: int, cutoff: datetime, now: datetime) -> bool:
    """A reaper's claim of a running run not heard from since ``cutoff``: its stamp touched,
    so a second reaper no longer sees it stale (app.runs.state.recovery.reap)."""
    stamp = func.coalesce(Run.heartbeat_at, Run.started_at)
    claim = update(Run).where(Run.id == run_id, Run.status == RunStatus.running)
    claim = claim.where(or_(stamp.is_(None), stamp < cutoff)).values(heartbeat_at=now)
    return took_effect(session, claim.execution_options(synchronize_session=False))


def queue(
    session: Session,
    *,
    experiment_id: int,
    owner_id: int,
    config: dict[str, Any],
    resume_from: str | None = None,
    priority: int = 0,
    sweep_id: int | None = None,
    name: str | None = None,
) -> Run:
    """A new run, queued; its task goes to the broker once the caller commits (a worker must
    never be handed a run id the database does not have yet)."""
    run = Run(
        experiment_id=experiment_id,
        owner_id=owner_id,
        status=RunStatus.queued,
        config=config,
        seed=config["seed"],
        resume_from=resume_from,
        priority=priority,
        sweep_id=sweep_id,
        name=name,
        dispatch=0,
        task_seen_at=utcnow(),
    )
    session.add(run)
    session.flush()
    run_id = run.id
    record_config(session, run_id=run_id, config=config)  # born with its params (issue 17 sorts)
    after_commit(session, lambda: enqueue_run(run_id, 0, pool_of(config)))
    return run


def open_external(
    session: Session,
    *,
    experiment_id: int,
    owner_id: int,
    origin: str,
    name: str | None,
    started_at: datetime,
) -> Run:
    """A run logged from outside (an MLflow client): running from birth, no job, no task, no
    config of its own (its params are what the client logs)."""
    run = Run(
        experiment_id=experiment_id,
        owner_id=owner_id,
        status=RunStatus.running,
        config={},
        seed=0,
        origin=origin,
        name=name,
        started_at=started_at,
        training_started_at=started_at,  # no environment of torchyard's to build
    )
    session.add(run)
    session.flush()
    return run


def _external(run_id: int, status: RunStatus) -> Update:
    return update(Run).where(Run.id == run_id, Run.origin.is_not(None), Run.status == status)


def end_external(
    session: Session, *, run_id: int, status: RunStatus, finished_at: datetime
) -> bool:
    """running -> a final status, as the external run's client says; False when it is not
    running (or not external)."""
    if not status.finished:
        raise ValueError(f"{status.value} is not a final status")
    done = took_effect(
        session, _external(run_id, RunStatus.running).values(status=status, finished_at=finished_at)
    )
    if done:
        run_ended_with(session, run_id, status)
    session.flush()
    return done


def reopen_external(session: Session, *, run_id: int, finished: RunStatus) -> bool:
    """An ended external run (status `finished`) running again: its client resumed it."""
    return took_effect(
        session,
        _external(run_id, finished).values(
            status=RunStatus.running, finished_at=None, cancel_requested=False
        ),
    )


def start(
    session: Session,
    *,
    run_id: int,
    host: str,
    gpu_indices: str,
    started_at: datetime,
) -> bool:
    """queued -> running on `host` with `gpu_indices` ("0,1"; "" without GPUs). False when it
    is not queued any more or its cancel was requested meanwhile: the caller takes no lease."""
    return took_effect(
        session,
        update(Run)
        .where(Run.id == run_id, Run.status == RunStatus.queued, ~Run.cancel_requested)
        .values(
            status=RunStatus.running,
            started_at=started_at,
            heartbeat_at=started_at,
            worker_host=host,
            gpu_indices=gpu_indices,
            **_NO_JOB,
        ),
    )


def hand_over(
    session: Session, *, run_id: int, attempt: int, external_id: str, reason: str | None
) -> bool:
    """The running attempt handed to an outside scheduler as its job `external_id` (a Slurm
    job: worker.slurm), and that scheduler's reason while it holds the job pending (None once
    it runs)."""
    held = {"external_id": external_id, "external_reason": reason[:255] if reason else None}
    return took_effect(session, running_as(run_id, attempt).values(**held))


def record_pid(session: Session, *, run_id: int, attempt: int, pid: int) -> bool:
    """The job's first process, once it is spawned (shown on the run's page)."""
    return took_effect(session, running_as(run_id, attempt).values(pid=pid))


def heartbeat(
    session: Session,
    *,
    run_id: int,
    attempt: int,
    renew_leases: bool,
    now: datetime | None = None,
) -> bool:
    """The worker still trains this attempt; its leases are renewed with the stamp. False
    when the run is not this worker's any more (handed over): its leases, if any now, belong
    to the next attempt and are not this worker's to keep alive."""
    now = now or utcnow()
    alive = took_effect(session, running_as(run_id, attempt).values(heartbeat_at=now))
    if alive and renew_leases:
        heartbeat_leases(session, run_id=run_id, now=now)
    return alive


def check_in(
    session: Session,
    *,
    run_id: int,
    attempt: int,
    renew_leases: bool,
    beat: bool,
    now: datetime | None = None,
) -> Standing:
    """What a worker training `attempt` asks every few moments: is it still mine, and was its
    cancel requested? With `beat` the heartbeat is stamped (and the leases renewed) first. A
    requested cancel wins over ownership: a run cancelled and ended meanwhile still has its
    job stopped."""
    if beat:
        heartbeat(session, run_id=run_id, attempt=attempt, renew_leases=renew_leases, now=now)
    row = session.execute(
        select(Run.status, Run.attempt, Run.cancel_requested).where(Run.id == run_id)
    ).one_or_none()
    if row is None:
        return Standing.DELETED
    if row.cancel_requested:
        return Standing.CANCEL_REQUESTED
    if row.status == RunStatus.running and row.attempt == attempt:
        return Standing.OWNED
    return Standing.NOT_OWNED


def holds(session: Session, *, run_id: int, attempt: int) -> bool:
    """Whether `attempt` still owns the run (running as it, or failed "worker lost" as it), asked
    by whatever writes on the attempt's behalf (the forwarder's batch): a late batch of an
    older attempt is refused. The answer holds to the end of the caller's transaction: a
    guarded UPDATE that changes nothing but takes the row's lock (SQLite: the write lock)."""
    owns = running_as(run_id, attempt).values(attempt=attempt)
    lost = _lost(run_id, attempt).values(attempt=attempt)
    return took_effect(session, owns) or took_effect(session, lost)


def finish(
    session: Session,
    *,
    run_id: int,
    attempt: int,
    status: RunStatus,
    exit_code: int | None,
    error: str | None,
    now: datetime | None = None,
) -> bool:
    """running -> succeeded | failed | cancelled, its leases released in the same transaction.
    Only while the run is still this attempt: a run the reaper already handed over (failed
    "worker lost", or requeued) keeps the status it has."""
    if not status.finished:
        raise ValueError(f"{status.value} is not a final status")
    done = took_effect(
        session,
        running_as(run_id, attempt).values(
            status=status, finished_at=now or utcnow(), exit_code=exit_code, error=error
        ),
    )
    if done:
        release_leases(session, run_id=run_id)
        guess = exit_code is None and (error or "").startswith(WORKER_LOST)  # settle() corrects
        run_ended_with(session, run_id, status, guess=guess)
    else:
        log.warning("run %s: attempt %s no longer runs; its status stays", run_id, attempt)
    session.flush()
    return done


def settle(
    session: Session, *, run_id: int, attempt: int, exit_code: int, error: str | None
) -> bool:
    """failed "worker lost" -> as the attempt's job exited (0: succeeded), when its worker,
    stalled past run_lost_seconds, comes back and finds the job ended: a known exit status
    beats the reaper's guess (issue 27), and only it is notified. Leases went with the failure."""
    status = RunStatus.succeeded if exit_code == 0 else RunStatus.failed
    values = {"status": status, "exit_code": exit_code, "error": error, "finished_at": utcnow()}
    done = took_effect(session, _lost(run_id, attempt).values(**values))
    if done:
        run_ended_with(session, run_id, status)
    session.flush()
    return done


def fail(
    session: Session, *, run_id: int, attempt: int, reason: str, now: datetime | None = None
) -> bool:
    """running -> failed for a reason outside the job (its worker lost or shut down)."""
    return finish(
        session,
        run_id=run_id,
        attempt=attempt,
        status=RunStatus.failed,
        exit_code=None,
        error=reason,
        now=now,
    )


def requeue(
    session: Session, *, run_id: int, attempt: int, resume_from: str | None, reason: str
) -> bool:
    """running (as `attempt`) -> queued as attempt + 1, resuming from `resume_from`; leases
    released, and the task enqueued once the caller commits."""
    done = took_effect(
        session,
        running_as(run_id, attempt).values(
            status=RunStatus.queued,
            attempt=attempt + 1,
            resume_from=resume_from,
            gpu_indices=None,
            heartbeat_at=None,
            external_id=None,
            external_reason=None,
            **_NO_JOB,
            error=f"attempt {attempt}: {reason}; requeued as attempt {attempt + 1}",
        ),
    )
    if done:
        release_leases(session, run_id=run_id)
        dispatch, pool = next_message(session, run_id=run_id), run_pool(session, run_id)
        after_commit(session, lambda: enqueue_run(run_id, dispatch, pool))
    session.flush()
    return done


def reclaim(
    session: Session, *, run_id: int, attempt: int, host: str, gpu_indices: str, now: datetime
) -> bool:
    """queued as attempt + 1 -> running as `attempt` on `host` (its last), no cancel asked: a
    reaper requeued it while its worker restarted, and the job trains on (app.runs.state.
    recovery.readopt). Its queued message then finds it running and does nothing."""
    back = update(Run).where(Run.id == run_id, Run.status == RunStatus.queued)
    back = back.where(Run.attempt == attempt + 1, Run.worker_host == host, ~Run.cancel_requested)
    why = f"attempt {attempt + 1} withdrawn: attempt {attempt}'s job trained on, re-adopted"
    return took_effect(
        session,
        back.values(status=RunStatus.running, attempt=attempt, heartbeat_at=now, error=why).values(
            gpu_indices=gpu_indices, training_started_at=now
        ),
    )


def cancel(session: Session, *, run_id: int, now: datetime | None = None) -> CancelOutcome:
    """A queued run ends here and now; a running one is marked, and its worker (which polls
    `cancel_requested`) stops every process of it and finishes it cancelled."""
    if took_effect(
        session,
        update(Run)
        .where(Run.id == run_id, Run.status == RunStatus.queued)
        .values(status=RunStatus.cancelled, finished_at=now or utcnow(), cancel_requested=True),
    ):
        run_ended_with(session, run_id, RunStatus.cancelled)
        return CancelOutcome.CANCELLED
    if took_effect(  # no worker stops an external run: it ends here (its client may go on)
        session,
        _external(run_id, RunStatus.running).values(
            status=RunStatus.cancelled, finished_at=now or utcnow(), cancel_requested=True
        ),
    ):
        run_ended_with(session, run_id, RunStatus.cancelled)
        return CancelOutcome.CANCELLED
    if took_effect(
        session,
        update(Run)
        .where(Run.id == run_id, Run.status == RunStatus.running)
        .values(cancel_requested=True),
    ):
        return CancelOutcome.REQUESTED
    return CancelOutcome.FINISHED
