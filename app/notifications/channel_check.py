"""The settings page's "Send test": one attempt per channel, now, answered to the user.

This is the one delivery made while a request waits, because the answer is its point. The
request holds no lock meanwhile (only reads so far; the log rows are written after the
sends), and each attempt is bounded by notify_timeout_seconds; the route is a plain `def`,
so it waits in the thread pool, never on the event loop.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from app.notifications import messages, service
from app.notifications.delivery import send
from app.notifications.models import Channel, Event, NotificationSettings
from app.notifications.schemas import ChannelResult, TestResultOut
from app.notifications.senders import SendError

log = logging.getLogger(__name__)


def send_test(session: Session, *, user_id: int, row: NotificationSettings) -> TestResultOut:
    payload = messages.compose(Event.test, None)
    results: list[tuple[Channel, str, bool, str]] = []
    for channel, target in service.channels(row):
        try:
            results.append((channel, target, True, send(channel, target, payload)))
        except SendError as exc:
            results.append((channel, target, False, str(exc)))
        log.info("notification test of user %s via %s: %s", user_id, channel.value, results[-1][3])
    service.log_test(session, user_id=user_id, results=results)
    return TestResultOut(
        results=[
            ChannelResult(channel=c, target=t, ok=ok, detail=note) for c, t, ok, note in results
        ]
    )
