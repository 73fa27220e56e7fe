"""Users and tokens. Functions flush; the caller commits."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import ApiToken, User
from app.auth.security import (
    generate_password,
    hash_password,
    new_token,
    token_digest,
    verify_password,
)
from app.timeutil import as_utc, utcnow

ADMIN_USERNAME = "admin"


def create_user(session: Session, *, username: str, password: str, is_admin: bool = False) -> User:
    user = User(username=username, password_hash=hash_password(password), is_admin=is_admin)
    session.add(user)
    session.flush()
    return user


def authenticate(session: Session, *, username: str, password: str) -> User | None:
    user = session.scalar(select(User).where(User.username == username))
    if user is None or not user.is_active or not verify_password(user.password_hash, password):
        return None
    return user


def issue_token(session: Session, *, user: User, ttl_hours: float, name: str = "") -> str:
    token = new_token()
    session.add(
        ApiToken(
            user_id=user.id,
            token_hash=token_digest(token),
            name=name,
            expires_at=utcnow() + timedelta(hours=ttl_hours),
        )
    )
    session.flush()
    return token


def user_for_token(session: Session, *, token: str) -> User | None:
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest(token)))
    if row is None or row.revoked_at is not None:
        return None
    if row.expires_at is not None and as_utc(row.expires_at) <= utcnow():
        return None
    user = session.get(User, row.user_id)
    return user if user is not None and user.is_active else None


def revoke_token(session: Session, *, token: str) -> None:
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest(token)))
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()


def ensure_admin(session: Session, *, password: str) -> str | None:
    """Create `admin` if missing. Returns the generated password when none was configured."""
    if session.scalar(select(User).where(User.username == ADMIN_USERNAME)) is not None:
        return None
    generated = None if password else generate_password()
    create_user(
        session, username=ADMIN_USERNAME, password=password or generated or "", is_admin=True
    )
    return generated
