"""Notification settings, the outbox, and the deliveries log. Takes the caller's session,
flushes, never commits; no network I/O here (app.notifications.delivery sends)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy import CursorResult, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.auth.models import User
from app.db import after_commit
from app.notifications import messages
from app.notifications.models import (
    Channel,
    Delivery,
    DeliveryStatus,
    Event,
    NotificationSettings,
)
from app.notifications.schemas import (
    NotificationSettingsIn,
    NotificationSettingsOut,
)
from app.runs.models import Run
from app.settings import get_settings
from app.timeutil import as_utc, utcnow

RECENT = 50


def settings_of(session: Session, user_id: int) -> NotificationSettings | None:
    return session.get(NotificationSettings, user_id)


def out(row: NotificationSettings | None) -> NotificationSettingsOut:
    email_available = bool(get_settings().smtp_host)
    if row is None:
        defaults = NotificationSettingsIn()
        return NotificationSettingsOut(**defaults.model_dump(), email_available=email_available)
    return NotificationSettingsOut(
        webhook_url=row.webhook_url,
        email=row.email,
        events=[Event(e) for e in row.events if e in Event.__members__],
        stalled_minutes=row.stalled_minutes,
        gpu_idle_minutes=row.gpu_idle_minutes,
        email_available=email_available,
    )


def save(session: Session, *, user: User, data: NotificationSettingsIn) -> NotificationSettings:
    """Replace the user's settings (NotificationSettingsIn has checked them, this server's
    rules included: the networks a webhook may reach, whether it can send e-mail)."""
    row = settings_of(session, user.id) or NotificationSettings(user_id=user.id)
    row.webhook_url = data.webhook_url
    row.email = data.email
    row.events = [e.value for e in data.events]
    row.stalled_minutes = data.stalled_minutes
    row.gpu_idle_minutes = data.gpu_idle_minutes
    row.updated_at = utcnow()
    session.add(row)
    session.flush()
    return row


def channels(row: NotificationSettings) -> list[tuple[Channel, str]]:
    found: list[tuple[Channel, str]] = []
    if row.webhook_url:
        found.append((Channel.webhook, row.webhook_url))
    if row.email:
        found.append((Channel.email, row.email))
    return found


def wants(row: NotificationSettings | None, event: Event) -> bool:
    return row is not None and event.value in row.events and bool(channels(row))


def subscriber(session: Session, run: Run, event: Event) -> NotificationSettings | None:
    """The run owner's settings when they want this event (an active user with a channel)."""
    owner = session.get(User, run.owner_id)
    if owner is None or not owner.is_active:
        return None
    row = settings_of(session, run.owner_id)
    return row if wants(row, event) else None


def record(
    session: Session,
    *,
    run: Run,
    event: Event,
    detail: str = "",
    hold_seconds: float = 0.0,
    **extra: Any,
) -> int:
    """Put the event in the outbox, one row per channel of the run owner's, once per
    (run, event, detail, channel): a repeat inserts nothing. Returns the rows inserted; the
    delivery threads are woken once the caller commits. ``hold_seconds``: not sent before
    then (an outcome that may still be corrected, ``withdraw_unsent``)."""
    row = subscriber(session, run, event)
    if row is None:
        return 0
    owner = session.get(User, run.owner_id)
    payload = messages.compose(
        event, messages.run_fields(run, owner.username if owner else "?"), **extra
    )
    values = [
        {
            "user_id": run.owner_id,
            "run_id": run.id,
            "event": event.value,
            "detail": detail[:255],
            "channel": channel.value,
            "target": target,
            "payload": payload,
            "status": DeliveryStatus.pending.value,
            "attempts": 0,
            "created_at": utcnow(),
            "next_attempt_at": utcnow() + timedelta(seconds=hold_seconds),
        }
        for channel, target in channels(row)
    ]
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    table = Delivery.__table__
    stmt = (
        insert(table)  # type: ignore[arg-type]
        .on_conflict_do_nothing(index_elements=["run_id", "event", "detail", "channel"])
        .returning(table.c.id)
    )
    inserted = 0
    for value in values:  # one statement per channel (two at most); rowcount is -1 on
        # psycopg for an INSERT it sends as one with RETURNING: the rows returned are exact
        inserted += len(session.connection().execute(stmt, value).all())
    if inserted:
        from app.notifications.delivery import wake

        after_commit(session, wake)
    return inserted


def withdraw_unsent(session: Session, *, run_id: int, events: Iterable[Event]) -> int:
    """Drop the run's messages of these events not tried yet (a held outcome that turned out
    wrong); returns how many. One already sent, or being sent, stays: it is in the user's inbox."""
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(Delivery).where(
            Delivery.run_id == run_id,
            Delivery.event.in_(list(events)),
            Delivery.status == DeliveryStatus.pending,
            Delivery.attempts == 0,
        )
    )
    return int(result.rowcount or 0)


def already(session: Session, *, run_id: int, event: Event) -> list[Delivery]:
    return list(
        session.scalars(select(Delivery).where(Delivery.run_id == run_id, Delivery.event == event))
    )


def recent(session: Session, *, user_id: int, limit: int = RECENT) -> list[Delivery]:
    return list(
        session.scalars(
            select(Delivery)
            .where(Delivery.user_id == user_id)
            .order_by(Delivery.id.desc())
            .limit(limit)
        )
    )


def test_cooldown_left(session: Session, *, user_id: int) -> float:
    """Seconds until this user may send another test (0: now)."""
    last = session.scalar(
        select(func.max(Delivery.created_at)).where(
            Delivery.user_id == user_id, Delivery.event == Event.test
        )
    )
    if last is None:
        return 0.0
    ready = as_utc(last) + timedelta(seconds=get_settings().notify_test_cooldown_seconds)
    return max(0.0, (ready - utcnow()).total_seconds())


def log_test(
    session: Session, *, user_id: int, results: Iterable[tuple[Channel, str, bool, str]]
) -> None:
    """The test's outcome per channel, in the log like any delivery (one attempt each)."""
    now = utcnow()
    payload = messages.compose(Event.test, None)
    for channel, target, ok, note in results:
        session.add(
            Delivery(
                user_id=user_id,
                run_id=None,
                event=Event.test,
                detail="",
                channel=channel,
                target=target,
                payload=payload,
                status=DeliveryStatus.delivered if ok else DeliveryStatus.failed,
                attempts=1,
                last_error=None if ok else note,
                created_at=now,
                next_attempt_at=now,
                delivered_at=now if ok else None,
            )
        )
    session.flush()
