"""The GPU page: hosts and their GPUs, the queue with reasons, GPU-hours per user."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.db import SessionDep
from app.gpus.panel import gpu_panel
from app.gpus.usage import gpu_usage
from app.pages import PageRoute, PageUser
from app.settings import get_settings
from app.templating import render
from app.timeutil import utcnow
from app.users.filters import page_owner

router = APIRouter(include_in_schema=False, route_class=PageRoute)

USAGE_DAYS = 7
USAGE_PERIODS = (1, 7, 30)


@router.get("/gpus", response_class=HTMLResponse)
def gpus_page(
    request: Request, session: SessionDep, user: PageUser, owner: str = ""
) -> HTMLResponse:
    settings = get_settings()
    now = utcnow()
    panel = gpu_panel(
        session,
        now=now,
        lease_ttl_seconds=settings.lease_ttl_seconds,
        starvation_seconds=settings.starvation_seconds,
    )
    owner_id, owner_name = page_owner(session, user=user, owner=owner)
    usage = gpu_usage(
        session, since=now - timedelta(days=USAGE_DAYS), until=now, now=now, owner_id=owner_id
    )
    return render(
        request,
        "gpus.html",
        user=user,
        panel=panel,
        usage=usage,
        usage_days=USAGE_DAYS,
        usage_periods=USAGE_PERIODS,
        owner=owner_name,
        # the queue's rows name owners by username: filtered by name, here and in gpus.js
        owner_filter=None
        if owner_id is None
        else (user.username if owner_id == user.id else owner_name),
    )
