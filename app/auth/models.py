from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Index, String
from sqlalchemy import false as sa_false
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class Role(StrEnum):
    """What a user may do. Every signed-in user reads everything on the box (the team sees
    each other's work); writes are the owner's or an admin's; a viewer never writes."""

    admin = "admin"
    member = "member"
    viewer = "viewer"


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16), default=Role.member, server_default="member")
    # False: disabled. Its tokens are refused and it cannot log in; its runs keep running.
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # An open invite: the SHA-256 of the link's secret (the link sets the first password).
    invite_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    invite_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Its password was generated (printed by `torchyard up`, the users page or API, an admin's
    # reset): someone else has seen it. Until the user sets their own, every API call but the
    # password change answers 403 and the pages lead to the account page (app.auth.deps).
    must_change_password: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=sa_false()
    )
    # Fair share's weight (issue 42, app/gpus/fairshare.py): None falls back to the role's.
    share_weight: Mapped[float | None] = mapped_column(Float, nullable=True)

    @property
    def is_admin(self) -> bool:
        return self.role == Role.admin

    @property
    def can_write(self) -> bool:
        """May create experiments and runs at all (a viewer may not)."""
        return self.role != Role.viewer

    def may_write(self, owner_id: int) -> bool:
        """May change, cancel, launch from or delete something owned by `owner_id`."""
        return self.is_admin or (self.can_write and owner_id == self.id)


class ApiToken(Base):
    """An opaque bearer token; only its SHA-256 is stored, so a database leak leaks no token."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Written by app.auth.token_use's flush, never by the request that used the token.
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class LoginAttempt(Base):
    """One password login, kept for rate limiting across every API process (an in-memory
    counter would give each uvicorn worker its own allowance)."""

    __tablename__ = "login_attempts"
    __table_args__ = (
        Index("ix_login_attempts_username_at", "username", "at"),
        Index("ix_login_attempts_client_at", "client", "at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(255))
    client: Mapped[str] = mapped_column(String(64))
    succeeded: Mapped[bool] = mapped_column(Boolean)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
