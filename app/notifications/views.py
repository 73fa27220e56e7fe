"""The notifications page in the account area: your channels and events, "Send test", and
the last deliveries. Forms post back (CSRF token as a field); a refused value is said next to
its field with a 422, the rest of what was typed kept in the form."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.auth.models import User
from app.db import SessionDep
from app.errors import Invalid
from app.notifications import service
from app.notifications.channel_check import send_test
from app.notifications.models import SUBSCRIBABLE
from app.notifications.schemas import NotificationSettingsIn
from app.pages import PageRoute, PageUser
from app.templating import render
from torchyard.field_location import location_text

router = APIRouter(include_in_schema=False, route_class=PageRoute)

EVENT_LABELS = {
    "succeeded": "Run finished (succeeded)",
    "failed": "Run failed",
    "cancelled": "Run cancelled",
    "non_finite": "A metric became NaN or infinite",
    "stalled": "No new step for N minutes",
    "gpu_idle": "A leased GPU idle for N minutes",
}


def _page(
    request: Request,
    session: Session,
    user: User,
    *,
    form: dict[str, Any] | None = None,
    status_code: int = 200,
    **context: object,
) -> HTMLResponse:
    current = service.out(service.settings_of(session, user.id))
    return render(
        request,
        "notifications.html",
        user=user,
        form=form or current.model_dump(mode="json"),
        email_available=current.email_available,
        events=[(e.value, EVENT_LABELS[e.value]) for e in SUBSCRIBABLE],
        deliveries=service.recent(session, user_id=user.id, limit=20),
        errors=context.pop("errors", {}),
        status_code=status_code,
        **context,
    )


@router.get("/account/notifications", response_class=HTMLResponse)
def notifications_page(request: Request, session: SessionDep, user: PageUser) -> HTMLResponse:
    return _page(request, session, user)


def _field_errors(exc: ValidationError | Invalid) -> dict[str, str]:
    """Each refused field's first message, by the field's name (the form shows it there)."""
    details = exc.errors() if isinstance(exc, ValidationError) else exc.errors
    found: dict[str, str] = {}
    for error in details:
        name = location_text(error["loc"]).partition(".")[0] or "form"
        message = str(error["msg"]).removeprefix("Value error, ")
        found.setdefault(name, message)
    return found or {"form": str(exc)}


@router.post("/account/notifications", response_class=HTMLResponse)
def save_form(
    request: Request,
    session: SessionDep,
    user: PageUser,
    webhook_url: Annotated[str, Form(max_length=4000)] = "",
    email: Annotated[str, Form(max_length=1000)] = "",
    events: Annotated[list[str] | None, Form(max_length=20)] = None,
    stalled_minutes: Annotated[str, Form(max_length=50)] = "30",
    gpu_idle_minutes: Annotated[str, Form(max_length=50)] = "30",
) -> HTMLResponse:
    typed = {
        "webhook_url": webhook_url,
        "email": email,
        "events": events or [],
        "stalled_minutes": stalled_minutes,
        "gpu_idle_minutes": gpu_idle_minutes,
    }
    try:
        data = NotificationSettingsIn.model_validate(typed)
        service.save(session, user=user, data=data)
    except (ValidationError, Invalid) as exc:
        return _page(request, session, user, form=typed, status_code=422, errors=_field_errors(exc))
    return _page(request, session, user, notice="Your notification settings were saved.")


@router.post("/account/notifications/test", response_class=HTMLResponse)
def test_form(request: Request, session: SessionDep, user: PageUser) -> HTMLResponse:
    """The same as POST /api/users/me/notifications/test, its answer shown on the page."""
    row = service.settings_of(session, user.id)
    if row is None or not service.channels(row):
        problem = "Nothing to test yet: save a webhook URL or an e-mail address first."
        return _page(request, session, user, status_code=409, test_error=problem)
    wait = service.test_cooldown_left(session, user_id=user.id)
    if wait > 0:
        problem = f"A test was sent moments ago; try again in {wait:.0f} s."
        return _page(request, session, user, status_code=429, test_error=problem)
    result = send_test(session, user_id=user.id, row=row)
    return _page(request, session, user, test_results=result.results)
