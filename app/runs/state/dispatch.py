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
  host of its pool is live (with none, no message is taken anyway: nothing is lost yet), to its
  pool's queue (app.broker.pool_queue, issue 40);
- ``message_lost`` is the same rule for the scheduler (app.gpus.fleet_view.queued_runs): a run
  whose message is missing never holds up another, and its reason says it is being sent again.

Issue 39: a task that has not come by is not always lost. When every worker thread is busy (or
a worker has not taken from a restarted Redis yet) the message waits in the broker's queue, and
sending another only piles up duplicates (180 for 18 runs in a soak). So where the broker can be
read (Redis: app.broker_queue) a run is sent again only when its current message is truly not
in the queue, and the scheduler's reason says "waiting for a free worker slot" for one that is;
one whose message is nowhere in Redis (a restart that lost it) is sent again after a short
grace instead of the full queue_resend_seconds; and messages a resend made obsolete are removed,
so a run has one message in the broker. A message the broker refused at once (a run submitted
while the broker is down) leaves the run queued with ``task_seen_at`` NULL: never seen, so lost
at once, and sent in the next
round that reaches the broker; the submission itself still answers 201.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import Session

from app.db import session_scope
from app.gpus.pools import live_pools, pool_of
from app.runs.models import Run, RunStatus
from app.settings import get_settings
from app.settings_pools import LOCAL_POOL
from app.timeutil import as_utc, utcnow

if TYPE_CHECKING:
    from app.broker_queue import RunMessage

log = logging.getLogger(__name__)

# How stale a stamp may be before a come-by writes it again: a waiting run's task comes by
# every schedule_retry_seconds, and a write each time would only add to the database's load.
STAMP_EVERY_FRACTION = 0.1
# A run whose message the broker does not hold at all is lost after this fraction of
# queue_resend_seconds without its task coming by (a task in a worker's hands comes by every
# schedule_retry_seconds; a message is out of both of Redis's places only for milliseconds).
NOWHERE_GRACE_FRACTION = 0.2


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


def enqueue_run(run_id: int, dispatch: int, pool: str = LOCAL_POOL) -> None:
    """Hand the run to its pool's queue, as its message number ``dispatch``; any worker of that
    pool on any host may take it. Runs after the run's transaction committed: a broker that
    refuses the message leaves the run queued and marked unsent (``resend_lost`` sends it once
    the broker answers), never fails the request that queued it (issue 39: HTTP 500 from
    kombu's OperationalError)."""
    from app.broker import send_run

    try:
        send_run(run_id, dispatch, pool)
    except Exception as exc:  # noqa: BLE001  # whatever the broker says, the run is committed
        log.warning(
            "run %s: the broker refused its message (%r); it stays queued and is sent once "
            "the broker answers",
            run_id,
            exc,
        )
        _mark_unsent(run_id, dispatch)


def _mark_unsent(run_id: int, dispatch: int) -> None:
    """No message ``dispatch`` of the run reached the broker: ``task_seen_at`` NULL makes it
    lost at once for ``resend_lost`` (else it would wait queue_resend_seconds for nothing)."""
    try:
        with session_scope() as session:
            session.execute(
                update(Run)
                .where(Run.id == run_id, Run.dispatch == dispatch, Run.status == RunStatus.queued)
                .values(task_seen_at=None)
            )
    except Exception:
        # The database is away too: the run is still found lost after queue_resend_seconds.
        log.warning("run %s: could not mark its message unsent", run_id, exc_info=True)


def next_message(session: Session, *, run_id: int) -> int:
    """A new message number for a run queued again (app.runs.state.lifecycle.requeue, in its
    transaction): the old attempt's message, if the broker ever gives it back, is dropped."""
    session.execute(
        update(Run).where(Run.id == run_id).values(dispatch=Run.dispatch + 1, task_seen_at=utcnow())
    )
    return session.scalar(select(Run.dispatch).where(Run.id == run_id)) or 0


def run_pool(session: Session, run_id: int) -> str:
    """The pool whose queue a run's messages go to (its config's `resources.pool`)."""
    return pool_of(session.scalar(select(Run.config).where(Run.id == run_id)) or {})


def lost_since(now: datetime) -> datetime:
    """A queued run whose task was last seen before this has lost its message."""
    return now - timedelta(seconds=get_settings().queue_resend_seconds)


def _not_seen_since(cutoff: datetime) -> ColumnElement[bool]:
    # task_seen_at NULL: no message of the run's current number ever reached the broker.
    return or_(Run.task_seen_at.is_(None), Run.task_seen_at < cutoff)


def message_lost(task_seen_at: datetime | None, now: datetime) -> bool:
    """The scheduler's view of one queued run (rows it has read already): its task has not
    come by for queue_resend_seconds, or its message never reached the broker. Whether such
    a message is really lost or waits for a free worker is ``waiting_in_broker``'s answer."""
    if get_settings().queue_resend_seconds <= 0:
        return False
    return task_seen_at is None or as_utc(task_seen_at) < lost_since(now)


def waiting_in_broker(run_ids: Mapping[int, int], pools: Collection[str] = ()) -> set[int]:
    """Which of these runs (id -> current message number; their pools' queues are read) have
    that message waiting in the broker's queue: not lost, only not taken yet (every worker
    busy). Empty where the broker cannot be read: then every stale run counts as lost, as
    before issue 39."""
    from app.broker_queue import BrokerUnreachable, read_run_messages, waiting

    try:
        messages = read_run_messages(pools) if run_ids else None
    except BrokerUnreachable:
        messages = None
    if messages is None:
        return set()
    held = waiting(messages)
    return {run_id for run_id, dispatch in run_ids.items() if held[(run_id, dispatch)]}


def _live_pools(now: datetime) -> set[str]:
    with session_scope() as session:
        return set(live_pools(session, now=now, ttl_seconds=get_settings().lease_ttl_seconds))


def resend_lost() -> list[int]:
    """Send again every queued run whose message is lost; returns their ids. Each run is taken
    by one conditional UPDATE of its dispatch number, so the API and every worker may run this
    at once and a run is still sent once."""
    from app.broker import send_run
    from app.broker_queue import BrokerUnreachable, read_run_messages, waiting

    if get_settings().queue_resend_seconds <= 0:
        return []
    now = utcnow()
    # Only the runs of pools with a live worker: no message of another pool is taken anyway.
    live = _live_pools(now)
    if not live:
        return []
    # Read before the runs: a message taken between the two reads is sent again needlessly,
    # but its old number is then dropped when it comes by (never the other way round).
    try:
        messages = read_run_messages(live)
    except BrokerUnreachable as exc:
        log.info("broker unreachable (%s): no run is sent again this round", exc)
        return []
    # Where the broker can be read, a run whose message is nowhere in it (neither waiting nor
    # taken by a worker) is lost once its task has not come by for a short grace, not after
    # the full queue_resend_seconds: a Redis restarted empty costs seconds, not 30-40.
    # One that waits in the queue is never lost; one only in a worker's hands (a killed
    # worker's, maybe) after the full time, as before.
    held = waiting(messages) if messages is not None else None
    anywhere = {(m.run_id, m.dispatch) for m in messages} if messages is not None else None
    settings = get_settings()
    cutoff = now - timedelta(seconds=settings.queue_resend_seconds * NOWHERE_GRACE_FRACTION)
    resent: list[tuple[int, int, str]] = []
    with session_scope() as session:
        stale = session.execute(
            select(Run.id, Run.dispatch, Run.task_seen_at, Run.config).where(
                Run.status == RunStatus.queued,
                ~Run.cancel_requested,
                _not_seen_since(cutoff if anywhere is not None else lost_since(now)),
            )
        ).all()
        for run_id, dispatch, seen, config in stale:
            pool = pool_of(config)
            if pool not in live:
                continue  # no worker takes it now: nothing is lost yet
            if held is not None and held[(run_id, dispatch)]:
                continue  # in the queue, waiting for a free worker slot: not lost
            if (
                anywhere is not None
                and (run_id, dispatch) in anywhere
                and not message_lost(seen, now)
            ):
                continue  # a worker holds it and asked about it lately
            taken = session.execute(
                update(Run)
                .where(Run.id == run_id, Run.dispatch == dispatch, Run.status == RunStatus.queued)
                .values(dispatch=dispatch + 1, task_seen_at=now)
            )
            if taken.rowcount == 1:  # type: ignore[attr-defined]  # a CursorResult for an UPDATE
                resent.append((run_id, dispatch + 1, pool))
    if messages:
        _drop_obsolete(messages)
    sent: list[int] = []
    for run_id, dispatch, pool in resent:
        try:
            send_run(run_id, dispatch, pool)
        except Exception as exc:  # noqa: BLE001  # the broker is away: the next round retries
            log.warning("run %s: the broker refused its message again (%r)", run_id, exc)
            for unsent_id, unsent_dispatch, _ in resent[len(sent) :]:
                _mark_unsent(unsent_id, unsent_dispatch)
            break
        log.warning("run %s: its queued message was lost; sent again (as %s)", run_id, dispatch)
        sent.append(run_id)
    return sent


def surplus(messages: list[RunMessage]) -> list[RunMessage]:
    """Copies of one run's current message past the first: a Redis restarted with its data
    brings back the messages a worker had taken (its unacknowledged hash) while the worker,
    reconnected, puts them back in the queue or sends their retries, so one number lasts twice
    (CI saw 2 for each of three queued runs). One waiting in the queue is kept before a taken
    one: a taken copy whose worker still runs it finds the run started when the other copy
    comes by, and one whose worker is gone would wait out the visibility timeout."""
    kept: set[int] = set()
    extra: list[RunMessage] = []
    for message in sorted(messages, key=lambda m: (m.run_id, not m.waiting)):
        if message.run_id in kept:
            extra.append(message)
        kept.add(message.run_id)
    return extra


def _drop_obsolete(messages: list[RunMessage]) -> None:
    """Remove the broker's messages that carry an older number than their run's (or whose run
    is gone): each would only be dropped on delivery, and one a killed worker took waits days
    for that. Before this round's sends, so that a run never has two messages at once."""
    from app.broker_queue import BrokerUnreachable, drop_run_messages

    with session_scope() as session:
        ids = {m.run_id for m in messages}
        current = dict(session.execute(select(Run.id, Run.dispatch).where(Run.id.in_(ids))).all())
    obsolete = [m for m in messages if m.run_id not in current or m.dispatch < current[m.run_id]]
    obsolete += surplus([m for m in messages if m.dispatch == current.get(m.run_id)])
    try:
        drop_run_messages(obsolete)
    except BrokerUnreachable as exc:
        log.info("broker unreachable (%s): obsolete messages left for the next round", exc)
    for message in obsolete:
        log.info(
            "run %s: obsolete message %s removed from the broker", message.run_id, message.dispatch
        )
