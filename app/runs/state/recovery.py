"""Runs whose worker went away: found by a stale heartbeat, then failed or requeued.

A worker stamps ``runs.heartbeat_at`` of each run it trains every few seconds. A running run
whose stamp is older than ``run_lost_seconds`` lost its worker (kill -9, a crashed host, a
cut network): it is never left "running". With ``max_restarts`` left it goes back to the
queue as its next attempt, resuming from its newest checkpoint; otherwise it fails with the
reason. A worker that shuts down warm hands its runs over the same way.

A reaper claims a run with one conditional UPDATE (still running, stamp still stale), so two
reapers (the API and every worker run one) never handle a run twice; the transitions
themselves are app.runs.state.lifecycle's, guarded by the attempt seen.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.experiments.config.model import config_code, run_config
from app.gpus.leases import retake_leases
from app.metrics.ingest import drop_points
from app.metrics.models import MetricKey
from app.metrics.summary import recompute_summaries
from app.runs.files import ingest_offsets
from app.runs.models import Checkpoint, Run, RunStatus
from app.runs.state import lifecycle
from app.runs.state.answers import WORKER_LOST
from app.timeutil import as_utc, utcnow
from torchyard.contract import SYSTEM_KEY_PREFIX

log = logging.getLogger(__name__)


class HandoverOutcome(enum.Enum):
    REQUEUED = "requeued"  # queued again as its next attempt
    FAILED = "failed"  # no restarts left
    CANCELLED = "cancelled"  # its cancel had been requested: it ends as asked, not requeued
    GONE = "gone"  # not running as that attempt any more: someone else handled it
    ENDED = "ended"  # its job ended while no worker watched it: its own exit status decides


@dataclass(frozen=True)
class Handover:
    run_id: int
    outcome: HandoverOutcome


def restarts_left(run: Run) -> bool:
    return run.attempt <= run_config(run.config).max_restarts


def newest_checkpoint(session: Session, *, run_id: int) -> Checkpoint | None:
    return session.scalar(
        select(Checkpoint)
        .where(Checkpoint.run_id == run_id)
        .order_by(Checkpoint.step.desc(), Checkpoint.id.desc())
        .limit(1)
    )


def requeue(session: Session, *, run: Run, reason: str) -> bool:
    """The run's next attempt: queued again, resuming from its newest checkpoint (from the
    start without one). Points past that checkpoint's step are dropped: the next attempt
    logs those steps again from the restored state, and its curve must be the one shown."""
    ckpt = newest_checkpoint(session, run_id=run.id)
    attempt = run.attempt
    if not lifecycle.requeue(
        session,
        run_id=run.id,
        attempt=attempt,
        resume_from=f"{run.id}/{ckpt.path}" if ckpt is not None else run.resume_from,
        reason=reason,
    ):
        return False
    resume_step = ckpt.step if ckpt is not None else 0
    # The worker's system series are kept: their steps are seconds, not training steps (the
    # next attempt's continue after them: worker.system_metrics).
    keys = select(MetricKey.id).where(
        MetricKey.run_id == run.id,
        func.substr(MetricKey.key, 1, len(SYSTEM_KEY_PREFIX)) != SYSTEM_KEY_PREFIX,
    )
    drop_points(session, key_ids=keys, after=resume_step)
    recompute_summaries(session, run_id=run.id)  # their last/max may have been among them
    from app.metrics.overview.stored import drop_overviews  # numpy: not in an idle process

    drop_overviews(session, key_ids=list(session.scalars(keys)))  # an overview cannot shrink
    session.flush()
    log.warning("run %s: %s; requeued as attempt %d", run.id, reason, attempt + 1)
    return True


def hand_over(
    session: Session,
    *,
    run: Run,
    reason: str,
    now: datetime | None = None,
    requeue_from_checkpoint: bool = False,
) -> HandoverOutcome:
    """Requeue the run when it has restarts left, else fail it; a run whose cancel was
    requested is cancelled instead (requeued, it would wait forever: the scheduler skips
    cancelled-on-request runs). Each only while it still runs as the attempt seen.

    ``requeue_from_checkpoint``: the run is requeued whenever it has a checkpoint, restarts
    left or not (a host that restarted under it, when `requeue_after_host_restart` is on: the
    run did nothing wrong, and it loses only what came after that checkpoint)."""
    now = now or utcnow()
    if run.cancel_requested:
        cancelled = lifecycle.finish(
            session,
            run_id=run.id,
            attempt=run.attempt,
            status=RunStatus.cancelled,
            exit_code=None,
            error=f"cancelled; {reason}",
            now=now,
        )
        return HandoverOutcome.CANCELLED if cancelled else HandoverOutcome.GONE
    resumable = requeue_from_checkpoint and newest_checkpoint(session, run_id=run.id) is not None
    if restarts_left(run) or resumable:
        requeued = requeue(session, run=run, reason=reason)
        return HandoverOutcome.REQUEUED if requeued else HandoverOutcome.GONE
    if lifecycle.fail(session, run_id=run.id, attempt=run.attempt, reason=reason, now=now):
        log.warning("run %s failed: %s", run.id, reason)
        return HandoverOutcome.FAILED
    return HandoverOutcome.GONE


def hand_over_attempt(
    session: Session,
    *,
    run_id: int,
    attempt: int,
    reason: str,
    requeue_from_checkpoint: bool = False,
) -> HandoverOutcome:
    """hand_over for a worker whose job was stopped under it (a shutdown that does not keep
    jobs, a host that restarted): only while the run still runs as `attempt`."""
    run = session.get(Run, run_id, populate_existing=True)
    if run is None or run.status != RunStatus.running or run.attempt != attempt:
        return HandoverOutcome.GONE
    return hand_over(
        session, run=run, reason=reason, requeue_from_checkpoint=requeue_from_checkpoint
    )


@dataclass(frozen=True)
class Readopted:
    """What the worker that re-adopts a job needs to watch it like its launcher did."""

    has_leases: bool
    in_sweep: bool
    gpu_indices: tuple[int, ...] = ()
    # The digest of its code snapshot: the shared copy is held again while the job runs.
    code: str | None = None


def readopt(
    session: Session,
    *,
    run_id: int,
    attempt: int,
    host: str,
    now: datetime | None = None,
    reclaim_gpus: tuple[int, ...] | None = None,
) -> Readopted | None:
    """A job left training by the previous worker on `host` (worker.adoption): while its run
    still runs as `attempt`, the run heartbeats again and gets back any lease that expired
    meanwhile (a GPU another run took refuses the whole unit of work at the flush); None when
    the run is not that attempt's any more.

    ``reclaim_gpus`` (the job is alive, on these GPUs): a run a reaper requeued meanwhile (the
    restart took longer than run_lost_seconds) is taken back as `attempt` while no other
    attempt has started (lifecycle.reclaim), and its spool is read again from the start to
    bring back the points the requeue dropped past its checkpoint: the training goes on, no
    step is redone (issue 39)."""
    now = now or utcnow()
    run = session.get(Run, run_id, populate_existing=True)
    if run is not None and reclaim_gpus is not None and run.status == RunStatus.queued:
        gpu_indices = ",".join(str(i) for i in reclaim_gpus)
        if lifecycle.reclaim(
            session, run_id=run_id, attempt=attempt, host=host, gpu_indices=gpu_indices, now=now
        ):
            ingest_offsets.rewind_spool(session, run_id=run_id)
            log.warning("run %s: attempt %d re-adopted; its requeue withdrawn", run_id, attempt)
            run = session.get(Run, run_id, populate_existing=True)
    if run is None or run.status != RunStatus.running or run.attempt != attempt:
        return None
    gpus = [int(i) for i in (run.gpu_indices or "").split(",") if i]
    retake_leases(session, run_id=run_id, host=host, indices=gpus, now=now)
    lifecycle.heartbeat(session, run_id=run_id, attempt=attempt, renew_leases=bool(gpus), now=now)
    config = run_config(run.config or {})
    return Readopted(
        has_leases=bool(gpus),
        in_sweep=run.sweep_id is not None,
        gpu_indices=tuple(gpus),
        code=config_code(config),
    )


def reap_lost_runs(
    session: Session,
    *,
    lost_after_seconds: float,
    now: datetime | None = None,
    salvage: Callable[[Session, int], None] | None = None,
    still_training: Callable[[int], bool] | None = None,
    ended_unwatched: Callable[[int], tuple[int, str | None] | None] | None = None,
) -> list[Handover]:
    """Fail or requeue every running run whose worker stopped heartbeating. ``salvage`` is
    given each claimed run first (the host's LocalJobs, app.runs.state.reaper, moves what is left of
    its spool).
    ``still_training`` names runs whose job is seen alive on this machine: not lost, only
    waiting for the host's next worker to re-adopt it (an upgrade may take minutes).
    ``ended_unwatched`` gives (exit status, error) of a job that ended on this machine while
    no worker watched it: the run ends as its job did, not as "worker lost"."""
    now = now or utcnow()
    cutoff = now - timedelta(seconds=lost_after_seconds)
    stamp = func.coalesce(Run.heartbeat_at, Run.started_at)
    stale = session.execute(
        select(Run.id, stamp).where(
            Run.status == RunStatus.running,
            Run.origin.is_(None),  # an external run has no worker to lose (app/mlflow)
            or_(stamp.is_(None), stamp < cutoff),
        )
    ).all()
    done: list[Handover] = []
    for run_id, seen in stale:
        if still_training is not None and still_training(run_id):
            continue
        # Claim it by touching the stamp: a second reaper's UPDATE no longer sees it stale.
        claimed = lifecycle.claim_stale(session, run_id=run_id, cutoff=cutoff, now=now)
        if not claimed:
            continue
        if salvage is not None:
            salvage(session, run_id)
        run = session.get(Run, run_id, populate_existing=True)
        assert run is not None
        ended = ended_unwatched(run_id) if ended_unwatched is not None else None
        if ended is not None:
            done.append(Handover(run_id, _end_as_its_job(session, run=run, ended=ended, now=now)))
            continue
        silent = f"{(now - as_utc(seen)).total_seconds():.0f} s" if seen else "ever"
        reason = f"{WORKER_LOST}: no heartbeat from {run.worker_host or 'its worker'} for {silent}"
        done.append(Handover(run_id, hand_over(session, run=run, reason=reason, now=now)))
    return done


def _end_as_its_job(
    session: Session, *, run: Run, ended: tuple[int, str | None], now: datetime
) -> HandoverOutcome:
    code, error = ended
    if run.cancel_requested:
        status = RunStatus.cancelled
    else:
        status = RunStatus.succeeded if code == 0 else RunStatus.failed
    took = lifecycle.finish(
        session,
        run_id=run.id,
        attempt=run.attempt,
        status=status,
        exit_code=code,
        error=None if status is RunStatus.succeeded else error,
        now=now,
    )
    return HandoverOutcome.ENDED if took else HandoverOutcome.GONE
