"""Queue reconciliation (issue 27): every queued run has a live broker message, or is sent again.

A run's task goes to the broker when the run is queued (lifecycle.queue, lifecycle.requeue),
and while the run waits the task puts itself back every schedule_retry_seconds: so the task
of a queued run comes by a worker again and again. A message can still be lost - the broker
flushed or restarted, a worker killed -9 with a message prefetched or unacknowledged (Redis
gives such a message back only after its visibility timeout: days) - and its run would then stay
queued forever, holding up every run of its size once it has starved. So:

- each message carries the run's dispatch number; ``current_message`` stamps the run's
  ``task_seen_at`` when the current one comes by, and answers False for an older one, which the
  task drops at once (so a duplicate delivery is harmless);
- ``resend_lost`` (periodic work, app.runs.state.scheduled) sends a message with a new dispatch
  number for every queued run whose task has not come by for queue_resend_seconds while a worker
  host is live (with none, no message is taken anyway: nothing is lost yet);
- ``message_lost`` is the same rule for the scheduler (app.gpus.service.queued_runs): a run
  whose message is missing never holds up another, and its reason says it is being sent again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session

from app.db import session_scope
from app.gpus.models import WorkerHost
from app.runs.models import Run, RunStatus
from app.settings import get_settings
from app.timeutil import as_utc, utcnow

log = logging.getLogger(__name__)

# How stale a stamp may be before a come-by writes it again: a waiting run's task comes by
# every schedule_retry_seconds, and a write each time would only add to the database's load.
STAMP_EVERY_FRACTION = 0.1


def current_message(run_id: int, dispatch: int) -> bool:
    """The run's task has come by a worker carrying ``dispatch``: is it the run's current
    message? Stamps ``task_seen_at`` for a queued run when it is."""
    settings = get_settings()
    now = utcnow()
    stamp_after = now - timedelta(seconds=settings.queue_resend_seconds * STAMP_EVERY_FRACTION)
    with session_scope() as session:
        current = session.scalar(select(Run.dispatch).where(Run.id == run_id))
        if current is None:
            return True  # gone: the run task itself says so (and returns)
        if current != dispatch:
            log.info("run %s: message %s dropped (current: %s)", run_id, dispatch, current)
            return False
        session.execute(
            update(Run)
            .where(
                Run.id == run_id,
                Run.dispatch == dispatch,
                Run.status == RunStatus.queued,
                or_(Run.task_seen_at.is_(None), Run.task_seen_at < stamp_after),
            )
            .values(task_seen_at=now)
        )
    return True


def enqueue_run(run_id: int, dispatch: int) -> None:
    """Hand the run to the broker, as its message number ``dispatch``; any worker of any host
    may take it."""
    from app.broker import send_run

    send_run(run_id, dispatch)


def next_message(session: Session, *, run_id: int) -> int:
    """A new message number for a run queued again (app.runs.state.lifecycle.requeue, in its
    transaction): the old attempt's message, if the broker ever gives it back, is dropped."""
    session.execute(
        update(Run).where(Run.id == run_id).values(dispatch=Run.dispatch + 1, task_seen_at=utcnow())
    )
    return session.scalar(select(Run.dispatch).where(Run.id == run_id)) or 0


def lost_since(now: datetime) -> datetime:
    """A queued run whose task was last seen before this has lost its message."""
    return now - timedelta(seconds=get_settings().queue_resend_seconds)


def _not_seen_since(cutoff: datetime) -> ColumnElement[bool]:
    # task_seen_at is NULL only for runs queued before the column existed: their queue time.
    return or_(Run.task_seen_at < cutoff, and_(Run.task_seen_at.is_(None), Run.created_at < cutoff))


def message_lost(task_seen_at: datetime | None, created_at: datetime, now: datetime) -> bool:
    """The scheduler's view of one queued run (rows it has read already)."""
    if get_settings().queue_resend_seconds <= 0:
        return False
    seen = as_utc(task_seen_at) if task_seen_at is not None else as_utc(created_at)
    return seen < lost_since(now)


def _worker_live(session: Session, now: datetime) -> bool:
    cutoff = now - timedelta(seconds=get_settings().lease_ttl_seconds)
    live = select(WorkerHost.host).where(WorkerHost.heartbeat_at >= cutoff)
    return session.scalar(live) is not None


def resend_lost() -> list[int]:
    """Send again every queued run whose message is lost; returns their ids. Each run is taken
    by one conditional UPDATE of its dispatch number, so the API and every worker may run this
    at once and a run is still sent once."""
    from app.broker import send_run

    if get_settings().queue_resend_seconds <= 0:
        return []
    now = utcnow()
    resent: list[tuple[int, int]] = []
    with session_scope() as session:
        if not _worker_live(session, now):
            return []
        stale = session.execute(
            select(Run.id, Run.dispatch).where(
                Run.status == RunStatus.queued,
                ~Run.cancel_requested,
                _not_seen_since(lost_since(now)),
            )
        ).all()
        for run_id, dispatch in stale:
            taken = session.execute(
                update(Run)
                .where(Run.id == run_id, Run.dispatch == dispatch, Run.status == RunStatus.queued)
                .values(dispatch=dispatch + 1, task_seen_at=now)
            )
            if taken.rowcount == 1:  # type: ignore[attr-defined]  # a CursorResult for an UPDATE
                resent.append((run_id, dispatch + 1))
    for run_id, dispatch in resent:
        log.warning("run %s: its queued message was lost; sent again (as %s)", run_id, dispatch)
        send_run(run_id, dispatch)
    return [run_id for run_id, _ in resent]
