"""The GPU page: hosts and their GPUs, the queue with reasons, GPU-hours per user, each
user's fair share (and, for admins, the form that sets a user's weight)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.auth.models import User
from app.db import SessionDep
from app.errors import Invalid
from app.gpus.panel import gpu_panel
from app.gpus.usage import gpu_usage
from app.pages import PageRoute, PageUser
from app.settings import get_settings
from app.templating import render
from app.timeutil import utcnow
from app.users import service
from app.users.filters import page_owner
from app.users.views import PageAdmin

router = APIRouter(include_in_schema=False, route_class=PageRoute)

USAGE_DAYS = 7
USAGE_PERIODS = (1, 7, 30)


@router.get("/gpus", response_class=HTMLResponse)
def gpus_page(
    request: Request, session: SessionDep, user: PageUser, owner: str = ""
) -> HTMLResponse:
    return _page(request, session, user, owner=owner)


@router.post("/gpus/share-weight", response_class=HTMLResponse)
def set_share_weight_form(
    request: Request,
    session: SessionDep,
    admin: PageAdmin,
    user_id: Annotated[int, Form(ge=1)],
    weight: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    """PUT /api/fair-share/users/{id}'s rules: empty falls back to the role's weight."""
    target = service.get_user(session, user_id)
    try:
        value = float(weight) if weight.strip() else None
        service.set_share_weight(session, user=target, weight=value)
    except (ValueError, Invalid):
        error = f"weight: must be a number greater than 0 (got {weight!r})"
        return _page(request, session, admin, status_code=422, share_error=error)
    return RedirectResponse("/gpus#fair-share", status_code=303)


def _page(
    request: Request,
    session: SessionDep,
    user: User,
    *,
    owner: str = "",
    status_code: int = 200,
    share_error: str = "",
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
        users=service.list_users(session) if user.is_admin else [],
        share_error=share_error,
        status_code=status_code,
        owner=owner_name,
        # the queue's rows name owners by username: filtered by name, here and in gpus.js
        owner_filter=None
        if owner_id is None
        else (user.username if owner_id == user.id else owner_name),
    )
