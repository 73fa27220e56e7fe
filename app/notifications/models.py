"""Notification settings per user, and the deliveries log, which is also the outbox.

A trigger (a run ending, a NaN arriving, a stalled run, an idle GPU) inserts one delivery row
per configured channel in the transaction that saw the event; a delivery thread sends the
pending rows after that commit (app.notifications.delivery). The unique constraint on
(run, event, detail, channel) is what makes each event go out once per run: a second
trigger of the same event (the next tick of a periodic check, a second process running the
same check) inserts nothing.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class Event(enum.StrEnum):
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    non_finite = "non_finite"  # a metric value arrived NaN or infinite
    stalled = "stalled"  # a running run logged no new step for N minutes
    gpu_idle = "gpu_idle"  # a leased GPU at 0% utilisation for N minutes
    test = "test"  # the settings page's "Send test"


# What a user may subscribe to (a test is always sent when asked for).
SUBSCRIBABLE = tuple(e for e in Event if e is not Event.test)


class Channel(enum.StrEnum):
    webhook = "webhook"
    email = "email"


class DeliveryStatus(enum.StrEnum):
    pending = "pending"  # waiting for its next attempt (next_attempt_at)
    sending = "sending"  # claimed by a delivery thread (claimed_at); re-claimable when stale
    delivered = "delivered"
    failed = "failed"  # every attempt failed, or the destination is refused


def _enum(kind: type[enum.StrEnum], length: int) -> SAEnum:
    return SAEnum(
        kind,
        native_enum=False,
        length=length,
        validate_strings=True,
        values_callable=lambda members: [m.value for m in members],
    )


class NotificationSettings(Base):
    """One user's choices. No row: nothing is sent."""

    __tablename__ = "notification_settings"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    webhook_url: Mapped[str | None] = mapped_column(String(2000))
    email: Mapped[str | None] = mapped_column(String(254))
    # Event values (Event) the user wants; a list in JSON.
    events: Mapped[list[str]] = mapped_column(JSON, default=list)
    stalled_minutes: Mapped[float] = mapped_column(Double, default=30.0)
    gpu_idle_minutes: Mapped[float] = mapped_column(Double, default=30.0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Delivery(Base):
    """One message to one channel: its attempts, its state and the last error, kept as the
    log the settings page and GET /api/users/me/notifications/deliveries show."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        UniqueConstraint("run_id", "event", "detail", "channel", name="uq_notification_once"),
        Index("ix_notification_deliveries_due", "status", "next_attempt_at"),
        Index("ix_notification_deliveries_user", "user_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # NULL for a test message (NULLs never collide in the unique constraint).
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    event: Mapped[Event] = mapped_column(_enum(Event, 16))
    # What within the run the event is about: the metric key for non_finite, "" otherwise.
    detail: Mapped[str] = mapped_column(String(255), default="")
    channel: Mapped[Channel] = mapped_column(_enum(Channel, 16))
    # The destination when the event happened (the URL or the address), and the message.
    target: Mapped[str] = mapped_column(String(2000))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[DeliveryStatus] = mapped_column(
        _enum(DeliveryStatus, 16), default=DeliveryStatus.pending
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
