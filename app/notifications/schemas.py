"""The notification settings as the API takes and gives them, and the deliveries log."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.notifications.models import SUBSCRIBABLE, Channel, DeliveryStatus, Event
from app.notifications.senders import host_problem, url_problem
from app.settings import get_settings
from app.timeutil import UtcDateTime

# Deliberately plain: one @, no spaces, quotes, angle brackets, commas or control characters
# (an address goes into a To: header), a dot in the domain or "localhost".
_ATOM = r"[^@\s<>,;:\"'\\()\[\]]"
_EMAIL = re.compile(rf"^{_ATOM}{{1,64}}@({_ATOM}+\.)*{_ATOM}+$")

DEFAULT_EVENTS = [e.value for e in SUBSCRIBABLE]


class NotificationSettingsIn(BaseModel):
    """PUT /api/users/me/notifications: the whole settings (a missing field takes its default).
    An empty or null webhook_url / email turns that channel off."""

    model_config = ConfigDict(extra="forbid")

    webhook_url: str | None = Field(default=None, max_length=2000)
    email: str | None = Field(default=None, max_length=254)
    events: list[Event] = Field(default_factory=lambda: [Event(e) for e in DEFAULT_EVENTS])
    stalled_minutes: float = Field(default=30, ge=1, le=7 * 24 * 60, allow_inf_nan=False)
    gpu_idle_minutes: float = Field(default=30, ge=1, le=7 * 24 * 60, allow_inf_nan=False)

    @field_validator("stalled_minutes", "gpu_idle_minutes", mode="before")
    @classmethod
    def _minutes_not_a_boolean(cls, value: Any) -> Any:
        """Pydantic takes `true` for 1.0 (lax mode, which the page's form strings need):
        a client that sends a boolean meant something else, so it is refused."""
        if isinstance(value, bool):
            raise ValueError("a number of minutes, not true or false")
        return value

    @field_validator("webhook_url", "email", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value.strip() if isinstance(value, str) else value

    @field_validator("webhook_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and (problem := url_problem(value) or host_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.match(value):
            raise ValueError("not an e-mail address (name@example.com)")
        if value is not None and not get_settings().smtp_host:
            raise ValueError("this server cannot send e-mail (no TORCHYARD_SMTP_HOST is set)")
        return value

    @field_validator("events")
    @classmethod
    def _events(cls, value: list[Event]) -> list[Event]:
        if Event.test in value:
            raise ValueError("'test' is not an event to subscribe to")
        return list(dict.fromkeys(value))


class NotificationSettingsOut(BaseModel):
    webhook_url: str | None
    email: str | None
    events: list[Event]
    stalled_minutes: float
    gpu_idle_minutes: float
    # Whether this server can send e-mail at all (TORCHYARD_SMTP_HOST).
    email_available: bool


class DeliveryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    run_id: int | None
    event: Event
    detail: str
    channel: Channel
    target: str
    status: DeliveryStatus
    attempts: int
    last_error: str | None
    created_at: UtcDateTime
    next_attempt_at: UtcDateTime
    delivered_at: UtcDateTime | None


class ChannelResult(BaseModel):
    channel: Channel
    target: str
    ok: bool
    detail: str = Field(description="What the destination answered, or why it failed")


class TestResultOut(BaseModel):
    results: list[ChannelResult]
