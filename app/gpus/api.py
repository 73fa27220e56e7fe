"""The GPU panel and per-user GPU accounting, for every logged-in user."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BeforeValidator
from sqlalchemy.orm import Session

from app.auth.deps import CurrentUser
from app.db import SessionDep
from app.errors import Invalid
from app.gpus import panel
from app.gpus.pools import live_pools, pool_executors
from app.gpus.schemas import GpuPanelOut, PoolOut, PoolsOut, UsageOut
from app.gpus.usage import gpu_usage
from app.http_errors import error_responses
from app.runs.streams.page_events import Snapshot, StreamUser, page_stream
from app.settings import get_settings
from app.settings_pools import LOCAL_POOL
from app.timeutil import as_utc, utcnow
from app.users.filters import OwnerQuery
from app.users.service import resolve_owner

router = APIRouter(prefix="/api", tags=["gpus"])

DEFAULT_USAGE_DAYS = 30

_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")


def _rfc3339(value: object) -> object:
    """What the document promises (format: date-time): a full timestamp with its offset, not
    the Unix seconds, dates or naive times pydantic would read on its own."""
    if isinstance(value, str) and not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-01-31T12:00:00Z")
    return value


Timestamp = Annotated[datetime, BeforeValidator(_rfc3339)]


def _panel(session: Session) -> GpuPanelOut:
    settings = get_settings()
    return panel.gpu_panel(
        session,
        now=utcnow(),
        lease_ttl_seconds=settings.lease_ttl_seconds,
        starvation_seconds=settings.starvation_seconds,
    )


@router.get("/gpus", response_model=GpuPanelOut)
def read_gpu_panel(session: SessionDep, _user: CurrentUser) -> GpuPanelOut:
    """Each live worker host's GPUs (free, leased by which run, busy with a process torchyard
    did not start) and the queue in scheduling order with the reason each run waits."""
    return _panel(session)


@router.get("/pools", response_model=PoolsOut)
def read_pools(session: SessionDep, _user: CurrentUser) -> PoolsOut:
    """The pools with a live worker and their hosts (issue 40): the experiment form offers
    these for a run's `resources.pool`. A run may name any pool; one without a live worker
    waits, its queue reason says so."""
    return PoolsOut(pools=live_pool_list(session))


def live_pool_list(session: Session) -> list[PoolOut]:
    now, ttl = utcnow(), get_settings().lease_ttl_seconds
    live = live_pools(session, now=now, ttl_seconds=ttl)
    executors = pool_executors(session, now=now, ttl_seconds=ttl)
    names = sorted(live, key=lambda name: (name != LOCAL_POOL, name))
    return [PoolOut(name=name, hosts=live[name], executor=executors[name]) for name in names]


@router.get(
    "/gpus/events",
    response_class=EventSourceResponse,
    responses=error_responses(401, 429, non_json_route=True),
)
async def gpu_panel_events(request: Request, user_id: StreamUser) -> AsyncIterator[ServerSentEvent]:
    """The GPU page's live view: a `gpus` event with the panel as GET /api/gpus answers it, at
    once and whenever it changes (its `generated_at` alone is no change); `ping` while quiet."""

    def read(session: Session) -> Snapshot:
        data = _panel(session).model_dump(mode="json")
        return Snapshot(data, same={k: v for k, v in data.items() if k != "generated_at"})

    async for event in page_stream(request, user_id, "gpus", read):
        yield event


def _in_utc(value: datetime, name: str) -> datetime:
    try:
        return as_utc(value).astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise Invalid.at(["query", name], "out of range in UTC", value) from None


def usage_period(
    since: datetime | None, until: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    end = _in_utc(until, "until") if until is not None else now
    if since is not None:
        start = _in_utc(since, "since")
    else:
        try:
            start = end - timedelta(days=DEFAULT_USAGE_DAYS)
        except OverflowError:  # an `until` in the first 30 days of year 1
            start = datetime.min.replace(tzinfo=UTC)
    if start >= end:
        raise Invalid.at(["query", "since"], "since must be before until", since)
    return start, end


@router.get("/usage", response_model=UsageOut)
def read_usage(
    session: SessionDep,
    user: CurrentUser,
    since: Annotated[
        Timestamp | None, Query(description="RFC 3339 (ISO 8601); default until - 30 days")
    ] = None,
    until: Annotated[
        Timestamp | None, Query(description="RFC 3339 (ISO 8601); default now")
    ] = None,
    owner: OwnerQuery = None,
) -> UsageOut:
    """GPU-hours per user over [since, until): everyone's, or one owner's (`owner=me`)."""
    now = utcnow()
    start, end = usage_period(since, until, now)
    owner_id = resolve_owner(session, user=user, owner=owner, loc="owner")
    users = gpu_usage(session, since=start, until=end, now=now, owner_id=owner_id)
    return UsageOut(since=start, until=end, users=users)
