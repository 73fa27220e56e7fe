"""Accounts: add users, change their role, disable them, set passwords; who an `owner` filter
means. Functions flush; the caller commits.

Rules kept here and nowhere else: usernames are 2-64 characters of letters, digits and
`._-` starting with a letter or digit (they appear in URLs, logs and the CLI); passwords
have at least `settings.password_min_length` characters; the box always keeps one active
admin (the last one can be neither demoted nor disabled: 409).
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.models import Role, User
from app.auth.security import (
    generate_password,
    new_token,
    token_digest,
    verify_password,
)
from app.auth.service import create_user, revoke_all_tokens, store_password
from app.db import MAX_ID
from app.errors import Conflict, Invalid, NotFound, field_error
from app.settings import get_settings
from app.timeutil import as_utc, utcnow

USERNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,63}")
USERNAME_RULE = "2-64 characters: letters, digits, '.', '_' or '-', starting with a letter or digit"
# An `owner` filter that means "everybody's" (as no filter does).
EVERYONE = frozenset({"", "everyone", "all"})
MINE = frozenset({"me", "mine"})


def username_problem(username: str) -> str | None:
    """Why `username` cannot be a username, or None when it can."""
    if USERNAME_RE.fullmatch(username) is None:
        return f"invalid username {username[:80]!r}: {USERNAME_RULE}"
    return None


def password_problem(password: str) -> str | None:
    """Why `password` is refused, or None when it is long enough."""
    minimum = get_settings().password_min_length
    if len(password) < minimum:
        return f"password too short: at least {minimum} characters"
    if "\x00" in password:
        return "password contains a NUL character"
    return None


def check_password(password: str, field: str = "password") -> None:
    problem = password_problem(password)
    if problem is not None:
        raise Invalid.at(["body", field], problem)


def add_user(
    session: Session, *, username: str, password: str, role: Role, temporary: bool = False
) -> User:
    """A new user; 422 for a bad name or password, 409 when the name is taken (in any case:
    `Ada` and `ada` would be two people nobody can tell apart). `temporary`: the password was
    generated for them (someone else saw it): they must change it at first login."""
    problem = username_problem(username)
    if problem is not None:
        raise Invalid.at(["body", "username"], problem, username[:80])
    check_password(password)
    taken = session.scalar(
        select(User.id).where(func.lower(User.username) == username.lower()).limit(1)
    )
    if taken is not None:
        raise Conflict(f"username {username!r} is taken")
    return create_user(
        session, username=username, password=password, role=role, must_change_password=temporary
    )


def invite_user(session: Session, *, username: str, role: Role) -> tuple[User, str]:
    """A new user without a password anyone knows, and the secret of the link that sets it
    (shown once; stored only hashed; valid for settings.invite_ttl_hours, once)."""
    user = add_user(session, username=username, password=generate_password(), role=role)
    secret = new_token()
    user.invite_hash = token_digest(secret)
    user.invite_expires_at = utcnow() + timedelta(hours=get_settings().invite_ttl_hours)
    session.flush()
    return user, secret


def user_for_invite(session: Session, secret: str) -> User | None:
    """The user an invite link is for, while it is open (not used, expired or disabled)."""
    if not secret or len(secret) > 200:
        return None
    user = session.scalar(select(User).where(User.invite_hash == token_digest(secret)))
    if user is None or not user.is_active or user.invite_expires_at is None:
        return None
    return user if as_utc(user.invite_expires_at) > utcnow() else None


def accept_invite(session: Session, *, user: User, password: str) -> User:
    check_password(password)
    store_password(user, password)
    user.invite_hash = None
    user.invite_expires_at = None
    user.must_change_password = False
    session.flush()
    return user


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.username)))


def get_user(session: Session, user_id: int) -> User:
    user = session.get(User, user_id) if 0 < user_id <= MAX_ID else None
    if user is None:
        raise NotFound.of("user", user_id)
    return user


def find_by_name(session: Session, username: str) -> User | None:
    return session.scalar(select(User).where(User.username == username))


def _other_active_admins(session: Session, user: User) -> int:
    stmt = select(func.count()).where(
        User.role == Role.admin, User.is_active.is_(True), User.id != user.id
    )
    return session.scalar(stmt) or 0


def set_role(session: Session, *, user: User, role: Role) -> User:
    if user.is_admin and role != Role.admin and not _other_active_admins(session, user):
        raise Conflict(f"{user.username} is the last active admin: make another admin first")
    user.role = role
    session.flush()
    return user


def set_disabled(session: Session, *, user: User, disabled: bool) -> User:
    """Disabling ends every token and browser session of the user at once (an open event
    stream notices within its re-check interval); their runs keep running."""
    if disabled and user.is_admin and not _other_active_admins(session, user):
        raise Conflict(f"{user.username} is the last active admin: it cannot be disabled")
    user.is_active = not disabled
    if disabled:
        revoke_all_tokens(session, user=user)
    session.flush()
    return user


def set_share_weight(session: Session, *, user: User, weight: float | None) -> User:
    """The user's fair-share weight (app/gpus/fairshare.py); None: their role's again. 422
    naming `weight` unless it is a positive, finite number."""
    if weight is not None and not (0 < weight < float("inf")):
        raise Invalid([field_error(("body", "weight"), "must be a number greater than 0", weight)])
    user.share_weight = weight
    session.flush()
    return user


def set_password(session: Session, *, user: User, password: str, temporary: bool) -> User:
    """An admin's reset (API, page, CLI): the user's browser sessions end with the old
    password (someone who had it may be logged in); their named API tokens stay. `temporary`
    (a password the admin chose or generated for someone else): the user must change it at
    their next login, and until then their tokens may do nothing else."""
    check_password(password)
    store_password(user, password)
    user.must_change_password = temporary
    user.invite_hash = user.invite_expires_at = None  # a set password closes an open invite
    revoke_all_tokens(session, user=user, sessions_only=True)
    session.flush()
    return user


def change_own_password(
    session: Session,
    *,
    user: User,
    current_password: str,
    new_password: str,
    current_token: str | None = None,
) -> User:
    """The user's own change: their other browser sessions end, the one making the change
    (`current_token`) stays logged in."""
    if not verify_password(user.password_hash, current_password):
        raise Invalid.at(["body", "current_password"], "the current password is not right")
    check_password(new_password, field="new_password")
    store_password(user, new_password)
    user.must_change_password = False
    revoke_all_tokens(session, user=user, sessions_only=True, keep=current_token)
    session.flush()
    return user


def resolve_owner(session: Session, *, user: User, owner: str | None, loc: str) -> int | None:
    """The user id an `owner` filter names: `me`/`mine` the caller, a username that user,
    nothing/`everyone` no filter (None). 422 for a username nobody has."""
    if owner is None or owner.strip().lower() in EVERYONE:
        return None
    if owner.strip().lower() in MINE:
        return user.id
    name = owner.strip()
    found = find_by_name(session, name) if username_problem(name) is None else None
    if found is None:
        raise Invalid.at(
            ["query", loc], "no such user; use 'me', 'everyone' or a username", owner[:80]
        )
    return found.id
