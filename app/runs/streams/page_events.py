"""Live pages other than a run's: the experiment, sweep and GPU pages' event streams.

Those pages used to ask the server again on a timer (every 2.5-3 s, each page its own way,
whether anything had changed or not). Each now holds one SSE stream, built here on the run
stream's parts (app/runs/streams/events.py: the per-user stream limit, the fair poll pool, pings,
the token re-check, the end on shutdown): the server reads a snapshot of what the page shows every
PAGE_POLL_SECONDS, in a short session of its own in the poll pool, and sends it only when it
differs from the last one sent. The page draws from the event's data (the GPU panel, a sweep)
or, where the data is large (an experiment's runs and their curves), the event is a digest of
what changed and the page reads what it shows through its usual API calls.

A quiet stream pings every PING_SECONDS, so a page notices a server gone silent; a snapshot
that says its subject is over (a sweep that ended) is the stream's last event.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import orjson
from fastapi import Depends, Request
from fastapi.sse import ServerSentEvent
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.auth.deps import CurrentUser, request_token
from app.auth.service import token_refusal
from app.db import database_away, session_scope
from app.metrics.models import MetricKey
from app.ops import shutdown
from app.runs.models import Run, RunStatus
from app.runs.streams.events import PING_SECONDS, RECONNECT_MS, in_pool, json_event, stream_slot
from app.settings import get_settings
from app.sweeps.models import Sweep, SweepStatus, SweepTrial

ACTIVE_STATUSES = [str(status) for status in RunStatus if not status.finished]

# How often a page's snapshot is read: the pages polled every 2.5-3 s; a stream reads more
# often for the same cost per change (a snapshot is sent only when it changed), and a second
# is as live as a page of tables needs.
PAGE_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Snapshot:
    """What a page shows now: `data` (JSON-able) is sent when `same` (default: data) differs
    from the last one sent; `final`: the subject is over, this is the stream's last event."""

    data: Any
    final: bool = False
    same: Any = None


async def _stream_user(user: CurrentUser) -> AsyncIterator[int]:
    """One of the user's open-stream slots (the run streams' limit), held until the stream's
    response ends; 429 naming the limit when all are taken. Gives the user id."""
    with stream_slot(user.id, get_settings().sse_max_streams_per_user):
        yield user.id


StreamUser = Annotated[int, Depends(_stream_user)]


def _read(read: Callable[[Session], Snapshot]) -> Snapshot:
    with session_scope() as session:
        return read(session)


async def page_stream(
    request: Request,
    user_id: int,
    event: str,
    read: Callable[[Session], Snapshot],
    *,
    interval: float = PAGE_POLL_SECONDS,
) -> AsyncIterator[ServerSentEvent]:
    """`event` with the page's snapshot, at the start and whenever it changes; ends with a
    final snapshot, on a refused token (an `error` event, as the run stream does) and when
    the server stops (the page reconnects)."""
    token = request_token(request)
    recheck = get_settings().sse_auth_recheck_seconds
    next_check = time.monotonic() + recheck
    last_sent = time.monotonic()
    sent: bytes | None = None
    while not shutdown.requested():
        if token and time.monotonic() >= next_check:
            reason = await in_pool(user_id, token_refusal, token)
            if reason is not None:
                yield ServerSentEvent(event="error", data={"detail": reason})
                return
            next_check = time.monotonic() + recheck
        try:
            snap: Snapshot | None = await in_pool(user_id, _read, read)
        except DBAPIError as e:
            if not database_away(e):
                raise
            snap = None  # the database is away for a moment: read again next time
        if snap is not None:
            key = orjson.dumps(snap.data if snap.same is None else snap.same)
            if key != sent:
                sent = key
                last_sent = time.monotonic()
                yield json_event(event, snap.data)
            if snap.final:
                return
        if time.monotonic() - last_sent >= PING_SECONDS:
            yield json_event("ping", {})
            last_sent = time.monotonic()
        else:
            yield ServerSentEvent(comment="keep-alive")
        await anyio.sleep(interval)
    yield ServerSentEvent(comment="server stopping", retry=RECONNECT_MS)


def experiment_digest(session: Session, experiment_id: int) -> Snapshot:
    """The experiment page's news, small whatever the experiment's size: its active runs (id,
    status, attempt, how far their metrics got), how many runs it has in each status and its
    newest run's id, and its sweeps (id, status, trial count). A change in the active runs, the
    counts or the newest id makes the page list its runs and fetch its active runs' new points
    again (a run that ends leaves the active runs and moves a count; a new or a deleted run
    moves the counts or the newest id); in `sweeps`, its sweeps. Every run of the experiment
    was listed here before: 2.7 MB an event at 100,000 runs, at each change (issue 43).
    `live`: whether anything is active (false: the stream's last event)."""
    of_experiment = Run.experiment_id == experiment_id
    counted = session.execute(
        select(Run.status, func.count(), func.max(Run.id)).where(of_experiment).group_by(Run.status)
    ).all()
    counts = {str(status): int(n) for status, n, _ in counted}
    newest = max((int(top) for _, _, top in counted), default=None)
    runs = session.execute(
        select(Run.id, Run.status, Run.attempt)
        .where(of_experiment, Run.status.in_(ACTIVE_STATUSES))
        .order_by(Run.id)
    ).all()
    active = [r.id for r in runs]
    # PostgreSQL's SUM of integers is numeric (a Decimal here, which JSON cannot carry).
    progress = (
        {
            run_id: None if total is None else int(total)
            for run_id, total in session.execute(
                select(MetricKey.run_id, func.sum(MetricKey.last_step))
                .where(MetricKey.run_id.in_(active))
                .group_by(MetricKey.run_id)
            ).all()
        }
        if active
        else {}
    )
    sweeps = session.execute(
        select(Sweep.id, Sweep.status, func.count(SweepTrial.number))
        .outerjoin(SweepTrial, SweepTrial.sweep_id == Sweep.id)
        .where(Sweep.experiment_id == experiment_id)
        .group_by(Sweep.id, Sweep.status)
        .order_by(Sweep.id)
    ).all()
    running_sweeps = sum(1 for _, status, _ in sweeps if status == SweepStatus.running)
    # Nothing active: the stream's last event, as the page's timers stopped once nothing ran (a
    # run launched later elsewhere shows on the next visit, as before).
    live = bool(active) or running_sweeps > 0
    return Snapshot(
        {
            "live": live,
            "runs": [[r.id, r.status, r.attempt, progress.get(r.id)] for r in runs],
            "active_runs": len(active),
            "counts": counts,
            "newest": newest,
            "sweeps": [[sweep_id, str(status), trials] for sweep_id, status, trials in sweeps],
        },
        final=not live,
    )
