"""The GPU panel and per-user GPU accounting, for every logged-in user."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from app.auth.deps import CurrentUser
from app.db import SessionDep
from app.errors import validation_error
from app.gpus import service
from app.gpus.schemas import GpuPanelOut, UsageOut
from app.settings import get_settings
from app.timeutil import as_utc, utcnow

router = APIRouter(prefix="/api", tags=["gpus"])

DEFAULT_USAGE_DAYS = 30


@router.get("/gpus", response_model=GpuPanelOut)
def read_gpu_panel(session: SessionDep, _user: CurrentUser) -> GpuPanelOut:
    """Each live worker host's GPUs (free, leased by which run, busy with a process torchyard
    did not start) and the queue in scheduling order with the reason each run waits."""
    settings = get_settings()
    return service.gpu_panel(
        session,
        now=utcnow(),
        lease_ttl_seconds=settings.lease_ttl_seconds,
        starvation_seconds=settings.starvation_seconds,
    )


def usage_period(
    since: datetime | None, until: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    end = as_utc(until) if until is not None else now
    start = as_utc(since) if since is not None else end - timedelta(days=DEFAULT_USAGE_DAYS)
    if start >= end:
        raise validation_error(
            [
                {
                    "loc": ["query", "since"],
                    "msg": "since must be before until",
                    "type": "value_error",
                }
            ]
        )
    return start, end


@router.get("/usage", response_model=UsageOut)
def read_usage(
    session: SessionDep,
    user: CurrentUser,
    since: Annotated[
        datetime | None, Query(description="ISO 8601; default until - 30 days")
    ] = None,
    until: Annotated[datetime | None, Query(description="ISO 8601; default now")] = None,
) -> UsageOut:
    """GPU-hours per user over [since, until): your own row, or every user's for admins."""
    now = utcnow()
    start, end = usage_period(since, until, now)
    users = service.gpu_usage(session, since=start, until=end, now=now, user=user)
    return UsageOut(since=start, until=end, users=users)
