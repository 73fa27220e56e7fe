"""Sending the outbox: a periodic job of every API process and every worker
(app/notifications/scheduled.py runs ``deliver_round``).

Each round claims the due rows (pending and past next_attempt_at, or "sending" for so long
that the process that claimed them must have died) with one conditional UPDATE per row, so
two processes never send the same attempt; commits the claim; sends with no transaction
open (a slow webhook holds no lock); and records the outcome in a new transaction:
delivered, pending again after a backoff (notify_retry_seconds, doubling), or failed after
notify_max_attempts (or at once when the destination is refused: retrying cannot help).
Every attempt is logged (``app.notifications``) and kept in the row (attempts, last_error).

The periodic checks (stalled runs, idle GPUs: app.notifications.triggers) are a job of their
own; this module never imports them (the triggers record into the outbox through
app.notifications.service, which wakes this job). ``wake()`` (after a trigger's commit)
starts the next round at once.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session

from app.db import session_scope
from app.notifications import messages
from app.notifications.models import Channel, Delivery, DeliveryStatus
from app.notifications.senders import Mail, SendError, post_webhook, send_mail
from app.settings import get_settings
from app.timeutil import utcnow

log = logging.getLogger(__name__)

# The delivery job's own event (app.periodic waits on it between rounds).
WAKE = threading.Event()
BATCH = 20


def wake() -> None:
    WAKE.set()


def _stale_claim() -> timedelta:
    """A claim older than this belongs to a process that died mid-send."""
    return timedelta(seconds=get_settings().notify_timeout_seconds * 3 + 30)


def _due(now: datetime, stale: datetime) -> ColumnElement[bool]:
    return or_(
        and_(Delivery.status == DeliveryStatus.pending, Delivery.next_attempt_at <= now),
        and_(Delivery.status == DeliveryStatus.sending, Delivery.claimed_at < stale),
    )


def claim_due(session: Session, *, limit: int = BATCH) -> list[tuple[int, int]]:
    """Claim due rows: (id, attempt number) of each this process now sends."""
    now = utcnow()
    due = _due(now, now - _stale_claim())
    ids = list(session.scalars(select(Delivery.id).where(due).order_by(Delivery.id).limit(limit)))
    claimed: list[tuple[int, int]] = []
    for delivery_id in ids:
        result = session.execute(
            update(Delivery)
            .where(Delivery.id == delivery_id, due)
            .values(
                status=DeliveryStatus.sending,
                claimed_at=now,
                attempts=Delivery.attempts + 1,
            )
            .returning(Delivery.attempts)
        )
        attempt = result.scalar()
        if attempt is not None:
            claimed.append((delivery_id, int(attempt)))
    return claimed


def send(channel: Channel, target: str, payload: dict[str, Any]) -> str:
    """One attempt over the network; returns a note, raises SendError."""
    settings = get_settings()
    if channel is Channel.webhook:
        return post_webhook(target, payload, settings)
    mail = Mail(to=target, subject=messages.subject(payload), body=messages.mail_body(payload))
    return send_mail(mail, settings)


def record_outcome(
    session: Session, *, delivery_id: int, attempt: int, error: SendError | None
) -> DeliveryStatus:
    settings = get_settings()
    now = utcnow()
    values: dict[str, Any]
    if error is None:
        status, values = DeliveryStatus.delivered, {"delivered_at": now, "last_error": None}
    elif error.final or attempt >= settings.notify_max_attempts:
        status, values = DeliveryStatus.failed, {"last_error": str(error)[:2000]}
    else:
        delay = settings.notify_retry_seconds * 2 ** (attempt - 1)
        status = DeliveryStatus.pending
        values = {
            "last_error": str(error)[:2000],
            "next_attempt_at": now + timedelta(seconds=delay),
        }
    session.execute(
        update(Delivery)
        .where(
            Delivery.id == delivery_id,
            Delivery.status == DeliveryStatus.sending,
            Delivery.attempts == attempt,
        )
        .values(status=status, claimed_at=None, **values)
    )
    return status


def deliver_due() -> int:
    """One round: claim, send, record. Returns how many attempts were made."""
    with session_scope() as session:
        claimed = claim_due(session)
        ids = [delivery_id for delivery_id, _attempt in claimed]
        rows = {
            d.id: (d.channel, d.target, d.payload, d.event.value, d.run_id)
            for d in session.scalars(select(Delivery).where(Delivery.id.in_(ids)))
        }
    for delivery_id, attempt in claimed:
        channel, target, payload, event, run_id = rows[delivery_id]
        error: SendError | None = None
        try:
            note = send(channel, target, payload)
        except SendError as exc:
            error, note = exc, str(exc)
        except Exception as exc:  # a bug must not stop every other delivery
            log.exception("notification %s: sending failed unexpectedly", delivery_id)
            error = SendError(f"{type(exc).__name__}: {exc}")
            note = str(error)
        with session_scope() as session:
            status = record_outcome(session, delivery_id=delivery_id, attempt=attempt, error=error)
        log.log(
            logging.INFO if error is None else logging.WARNING,
            "notification %s (%s of run %s) via %s, attempt %s: %s -> %s",
            delivery_id,
            event,
            run_id,
            channel.value,
            attempt,
            note,
            status.value,
        )
    return len(claimed)


def deliver_round() -> int:
    """Every due delivery, batch after batch, until none is left; how many attempts."""
    made = 0
    while sent := deliver_due():
        made += sent
    return made
