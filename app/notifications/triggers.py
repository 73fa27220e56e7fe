"""When a notification is due. Each trigger only records the event in the outbox, in the
caller's transaction (app.notifications.service.record); nothing here touches the network.

- A run's end: app.runs.state.lifecycle calls ``run_ended`` in the transaction of the final status.
  A reaper's "worker lost" is held (notify_worker_lost_hold_seconds) and, when the stalled
  worker comes back with its job's real exit status in time, replaced (``run_corrected``):
  only the final outcome is sent.
- NaN/inf: the forwarder calls ``metrics_arrived`` with each batch of spool lines; the spool
  writes NaN as null and +/-inf as their tokens, which the parser reads as +/-inf, so a None
  or an infinity among a line's values is one. Once per run and
  key (the keys already reported are read from the run's earlier non_finite rows), and at most
  MAX_NON_FINITE_MESSAGES messages per run, however many keys a job makes NaN.
- Stalled and GPU idle: ``PeriodicChecks.run`` on every round of the delivery loop.
  Stalled: a running run whose newest step (its highest step's wall time, over every key but
  the worker's own ``sys/`` series) and whose start are both older than the owner's N
  minutes. GPU idle: a leased GPU whose utilisation, in its host's fresh NVML stats
  (worker_hosts.gpu_stats, refreshed every lease_ttl/3 by the host heartbeat), has read 0
  ever since this process first saw it so, for N minutes; the start of that stretch is kept in
  this process's memory (a restart starts counting again). A GPU the host's stats do not
  show idle (a fake inventory has none) is judged by the run's own GPU series instead
  (app.metrics.gpu_efficiency.idle_gpus: NVML's stand-in feeds them). Idle is utilisation below
  settings.gpu_idle_below_percent. Each is recorded once per run. The same round puts the
  run-page notice on every run idle past the admin's threshold (app.runs.state.idle_notice).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, func, select
from sqlalchemy.orm import Session

from app.gpus.models import GpuLease, WorkerHost
from app.metrics.gpu_efficiency import idle_gpus
from app.metrics.models import Metric, MetricKey
from app.notifications.models import Delivery, Event, NotificationSettings
from app.notifications.service import already, record, subscriber, wants, withdraw_unsent
from app.runs.models import Run, RunStatus
from app.settings import get_settings
from app.timeutil import as_utc, utcnow

log = logging.getLogger(__name__)

MAX_NON_FINITE_MESSAGES = 5
MAX_KEYS_LISTED = 20
_INFINITIES = (math.inf, -math.inf)
SYSTEM_PREFIX = "sys/"
_END_EVENTS = {
    RunStatus.succeeded: Event.succeeded,
    RunStatus.failed: Event.failed,
    RunStatus.cancelled: Event.cancelled,
}


@contextmanager
def best_effort(what: str, run_id: int) -> Iterator[None]:
    """A trigger inside someone else's transaction (a run's final status, a batch of points)
    must never cost it: in a savepoint, and an error is logged and dropped with it."""
    try:
        yield
    except Exception:
        log.exception("run %s: recording the %s notification failed", run_id, what)


def run_ended(session: Session, *, run_id: int, status: RunStatus, guess: bool = False) -> None:
    """The run's end in the outbox, in place of an earlier end's message not sent yet (a
    reaper's "worker lost" corrected to how its job exited: only the final outcome is sent).
    ``guess``: an outcome that may still be corrected so: it waits
    notify_worker_lost_hold_seconds before it is sent."""
    event = _END_EVENTS.get(status)
    if event is None:
        return
    hold = get_settings().notify_worker_lost_hold_seconds if guess else 0.0
    with best_effort(event.value, run_id), session.begin_nested():
        withdraw_unsent(session, run_id=run_id, events=_END_EVENTS.values())
        run = session.get(Run, run_id, populate_existing=True)
        if run is not None:
            record(session, run=run, event=event, hold_seconds=hold)


def _non_finite(value: Any) -> bool:
    """None (NaN) or +/-inf; a bool or an int is finite."""
    return value is None or value in _INFINITIES


def non_finite(steps: Sequence[tuple[int, float, Mapping[str, Any]]]) -> tuple[int, set[str]]:
    """(first step, keys) of the None (NaN) and infinite values among metrics lines; (0, set())
    when none."""
    first, keys = 0, set[str]()
    for step, _wall, values in steps:
        bad = [k for k, v in values.items() if _non_finite(v)]
        if bad:
            if not keys:
                first = step
            keys.update(bad)
    return first, keys


def metrics_arrived(
    session: Session, *, run_id: int, steps: Sequence[tuple[int, float, Mapping[str, Any]]]
) -> None:
    """Called by the forwarder only for a batch the spool parser saw a null or an infinity in
    (Parsed.non_finite: free on its fast path), so a batch without one costs nothing here."""
    step, keys = non_finite(steps)
    if not keys:
        return
    with best_effort(Event.non_finite.value, run_id), session.begin_nested():
        _record_non_finite(session, run_id=run_id, step=step, keys=keys)


def _record_non_finite(session: Session, *, run_id: int, step: int, keys: set[str]) -> None:
    run = session.get(Run, run_id)
    if run is None or subscriber(session, run, Event.non_finite) is None:
        return
    earlier = already(session, run_id=run_id, event=Event.non_finite)
    if len({d.detail for d in earlier}) >= MAX_NON_FINITE_MESSAGES:
        return
    known: set[str] = set()
    for delivery in earlier:
        known.update(delivery.payload.get("keys", []))
    new = sorted(keys - known)
    if new:
        listed = new[:MAX_KEYS_LISTED]
        record(session, run=run, event=Event.non_finite, detail=new[0], keys=listed, step=step)


def _subscribed_running(session: Session, event: Event) -> list[tuple[Run, NotificationSettings]]:
    rows = session.execute(
        select(Run, NotificationSettings)
        .join(NotificationSettings, NotificationSettings.user_id == Run.owner_id)
        .where(
            Run.status == RunStatus.running,
            ~exists().where(Delivery.run_id == Run.id, Delivery.event == event),
        )
    ).all()
    return [(run, row) for run, row in rows if wants(row, event)]


def last_step_time(session: Session, run_id: int) -> float | None:
    """Wall time of the run's newest step over its own keys (not the worker's sys/ series)."""
    return session.scalar(
        select(func.max(Metric.wall_time))
        .select_from(MetricKey)
        .join(Metric, and_(Metric.key_id == MetricKey.id, Metric.step == MetricKey.last_step))
        .where(MetricKey.run_id == run_id, ~MetricKey.key.startswith(SYSTEM_PREFIX))
    )


def check_stalled(session: Session, *, now: datetime) -> int:
    minute = get_settings().notify_minute_seconds
    found = 0
    for run, row in _subscribed_running(session, Event.stalled):
        if run.started_at is None:
            continue
        newest = max(as_utc(run.started_at).timestamp(), last_step_time(session, run.id) or 0.0)
        if now.timestamp() - newest >= row.stalled_minutes * minute:
            found += record(session, run=run, event=Event.stalled, minutes=row.stalled_minutes)
    return found


@dataclass
class PeriodicChecks:
    """The checks of one process's delivery loop, and what the GPU check remembers."""

    idle_since: dict[tuple[int, str, int], datetime] = field(default_factory=dict)

    def run(self, now: datetime | None = None) -> None:
        from app.db import session_scope
        from app.runs.state.idle_notice import check_idle_runs

        now = now or utcnow()
        with session_scope() as session:
            check_stalled(session, now=now)
            self.check_gpu_idle(session, now=now)
            check_idle_runs(session, now=now)

    def check_gpu_idle(self, session: Session, *, now: datetime) -> int:
        settings = get_settings()
        subscribed = {
            run.id: (run, row) for run, row in _subscribed_running(session, Event.gpu_idle)
        }
        leases = session.execute(
            select(GpuLease.run_id, GpuLease.host, GpuLease.gpu_index).where(
                GpuLease.run_id.in_(subscribed)
            )
        ).all()
        hosts = {
            h.host: h
            for h in session.scalars(
                select(WorkerHost).where(WorkerHost.host.in_({lease.host for lease in leases}))
            )
        }
        seen: set[tuple[int, str, int]] = set()
        idle: dict[int, list[str]] = {}
        for run_id, host_name, index in leases:
            key = (run_id, host_name, index)
            host = hosts.get(host_name)
            stats = {int(g.get("index", -1)): g for g in (host.gpu_stats or [])} if host else {}
            util = stats.get(index, {}).get("utilization")
            fresh = host is not None and (
                (now - as_utc(host.heartbeat_at)).total_seconds() <= settings.lease_ttl_seconds
            )
            below = settings.gpu_idle_below_percent
            if not fresh or not isinstance(util, int | float) or util >= below:
                continue  # not seen idle now: the stretch, if any, ends (pruned below)
            seen.add(key)
            since = self.idle_since.setdefault(key, now)
            minutes = subscribed[run_id][1].gpu_idle_minutes
            if (now - since).total_seconds() >= minutes * settings.notify_minute_seconds:
                idle.setdefault(run_id, []).append(f"{host_name}:{index}")
        for key in set(self.idle_since) - seen:
            del self.idle_since[key]
        for run_id, (_run, row) in subscribed.items():
            if run_id not in idle:
                by_series = idle_gpus(
                    session,
                    run_id=run_id,
                    below=settings.gpu_idle_below_percent,
                    seconds=row.gpu_idle_minutes * settings.notify_minute_seconds,
                    now=now.timestamp(),
                )
                if by_series:
                    idle[run_id] = by_series
        found = 0
        for run_id, gpus in idle.items():
            run, row = subscribed[run_id]
            found += record(
                session, run=run, event=Event.gpu_idle, gpus=gpus, minutes=row.gpu_idle_minutes
            )
        return found
