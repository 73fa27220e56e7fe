"""Your own notification settings, a test message, and the log of what was sent.

Every signed-in user has their own (a viewer too: it is account data, not a write to the
team's work); nobody reads or sets another user's.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.auth.deps import CurrentUser
from app.db import SessionDep
from app.errors import Conflict, TooMany
from app.http_errors import error_responses
from app.notifications import service
from app.notifications.channel_check import send_test
from app.notifications.schemas import (
    DeliveryOut,
    NotificationSettingsIn,
    NotificationSettingsOut,
    TestResultOut,
)

router = APIRouter(prefix="/api/users/me/notifications", tags=["notifications"])


@router.get("", response_model=NotificationSettingsOut)
def read_settings(user: CurrentUser, session: SessionDep) -> NotificationSettingsOut:
    """Your settings (the defaults, with no channel, until you save some)."""
    return service.out(service.settings_of(session, user.id))


@router.put("", response_model=NotificationSettingsOut, responses=error_responses(400))
def save_settings(
    data: NotificationSettingsIn, user: CurrentUser, session: SessionDep
) -> NotificationSettingsOut:
    """Replace your settings. 422 naming the field: a URL that is not http(s) or names a
    non-public address the server does not allow, an e-mail address that is not one (or any,
    when the server has no SMTP server), minutes out of 1-10080, an unknown event."""
    return service.out(service.save(session, user=user, data=data))


@router.post("/test", response_model=TestResultOut, responses=error_responses(409, 429))
def test_settings(user: CurrentUser, session: SessionDep) -> TestResultOut:
    """Send a test message to each channel you saved, now, and answer what each one did
    (one attempt, no retry; kept in the deliveries log). 409 without a channel; 429 within
    notify_test_cooldown_seconds of your last test."""
    row = service.settings_of(session, user.id)
    if row is None or not service.channels(row):
        raise Conflict("no channel to test: save a webhook URL or an e-mail address first")
    wait = service.test_cooldown_left(session, user_id=user.id)
    if wait > 0:
        raise TooMany(
            f"a test was sent moments ago; try again in {wait:.0f} s",
            retry_after=max(1, round(wait)),
        )
    return send_test(session, user_id=user.id, row=row)


@router.get("/deliveries", response_model=list[DeliveryOut])
def read_deliveries(user: CurrentUser, session: SessionDep) -> list[DeliveryOut]:
    """Your last 50 deliveries, newest first: event, run, channel, attempts, status, error."""
    return [DeliveryOut.model_validate(d) for d in service.recent(session, user_id=user.id)]
