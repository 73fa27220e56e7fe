"""Users, password logins and tokens. Functions flush; the caller commits (except that a
failed login is recorded in a transaction of its own, see `password_login`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.auth import ratelimit, token_use
from app.auth.models import ApiToken, Role, User
from app.auth.schemas import TokenInfo
from app.auth.security import (
    generate_password,
    hash_password,
    needs_rehash,
    new_token,
    token_digest,
    verify_password,
)
from app.db import MAX_ID, session_scope
from app.settings import Settings
from app.timeutil import as_utc, utcnow

ADMIN_USERNAME = "admin"
# The name of the token a browser login makes (its session cookie holds it).
BROWSER_SESSION = "browser"


@dataclass(frozen=True)
class LoginRefused(Exception):
    """A password login that did not succeed: wrong credentials (401) or throttled (429)."""

    message: str
    retry_after: int | None = None


@lru_cache
def _dummy_hash() -> str:
    return hash_password(generate_password())


def create_user(
    session: Session,
    *,
    username: str,
    password: str,
    role: Role | str = Role.member,
    must_change_password: bool = False,
) -> User:
    """The bare insert; app.users.service.add_user checks the name and password first."""
    user = User(
        username=username,
        password_hash=hash_password(password),
        role=Role(role),
        must_change_password=must_change_password,
    )
    session.add(user)
    session.flush()
    return user


def store_password(user: User, password: str) -> None:
    """The one place a password is hashed into its column (users.password_hash is auth's:
    docs/architecture.md); the caller has checked the password's rules and flushes."""
    user.password_hash = hash_password(password)


def revoke_all_tokens(
    session: Session, *, user: User, sessions_only: bool = False, keep: str | None = None
) -> None:
    """Revoke the user's tokens: all of them, or only browser sessions; but `keep` (a token
    secret: the one the request came with)."""
    stmt = update(ApiToken).where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
    if sessions_only:
        stmt = stmt.where(ApiToken.name == BROWSER_SESSION)
    if keep is not None:
        stmt = stmt.where(ApiToken.token_hash != token_digest(keep))
    session.execute(stmt.values(revoked_at=utcnow()))


def authenticate(session: Session, *, username: str, password: str) -> User | None:
    user = session.scalar(select(User).where(User.username == username))
    if user is None:
        verify_password(_dummy_hash(), password)  # the same time as a wrong password
        return None
    if not user.is_active or not verify_password(user.password_hash, password):
        return None
    if needs_rehash(user.password_hash):
        # The hashing parameters were raised since this hash was made: the password is at
        # hand only now, so re-hash it with today's parameters.
        store_password(user, password)
        session.flush()
    return user


def password_login(
    session: Session,
    *,
    username: str,
    password: str,
    client: str,
    settings: Settings,
    clock: Callable[[], datetime] = utcnow,
) -> User:
    """`authenticate` behind the login rate limit (app.auth.ratelimit).

    The window is measured on ``clock``, so a test can move time instead of sleeping through
    it (a one-second wall-clock window failed under load). A failure is recorded in a session
    of its own that commits at once: the caller's transaction ends with an error response and
    rolls back, and the count must survive it.
    """
    if "\x00" in username or "\x00" in password or len(username) > 255:
        # No user has such a name (PostgreSQL cannot even store one): refused before any query.
        raise LoginRefused("incorrect username or password")
    now = clock()
    throttled = ratelimit.check(
        session, username=username, client=client, now=now, settings=settings
    )
    if throttled is not None:
        raise LoginRefused(throttled.message, retry_after=throttled.retry_after)
    user = authenticate(session, username=username, password=password)
    if user is None:
        with session_scope() as own:
            ratelimit.record(
                own, username=username, client=client, succeeded=False, now=now, settings=settings
            )
        raise LoginRefused("incorrect username or password")
    ratelimit.record(
        session, username=username, client=client, succeeded=True, now=now, settings=settings
    )
    return user


def create_token(
    session: Session, *, user: User, ttl_hours: float, name: str = ""
) -> tuple[ApiToken, str]:
    """A new token row and its secret: the secret is returned once and stored only hashed."""
    secret = new_token()
    row = ApiToken(
        user_id=user.id,
        token_hash=token_digest(secret),
        name=name,
        expires_at=utcnow() + timedelta(hours=ttl_hours),
    )
    session.add(row)
    session.flush()
    return row, secret


def issue_token(session: Session, *, user: User, ttl_hours: float, name: str = "") -> str:
    return create_token(session, user=user, ttl_hours=ttl_hours, name=name)[1]


def check_token(session: Session, *, token: str) -> User | str:
    """The token's user, or why it is refused (said in the 401 body)."""
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest(token)))
    if row is None:
        return "invalid token: not one this server issued"
    user = session.get(User, row.user_id)
    if user is None or not user.is_active:
        return "this account is disabled: ask an admin"
    if row.revoked_at is not None:
        return f"token revoked at {as_utc(row.revoked_at).isoformat()}: create a new one"
    if row.expires_at is not None and as_utc(row.expires_at) <= utcnow():
        return f"token expired at {as_utc(row.expires_at).isoformat()}: log in again"
    # Noted in memory, written later off the request path: a read request writes nothing.
    token_use.note(row.id, utcnow())
    return user


def token_expiry(session: Session, *, token: str) -> datetime | None:
    """When `token` expires (None: unknown token, or one that never expires)."""
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest(token)))
    return as_utc(row.expires_at) if row is not None and row.expires_at is not None else None


def token_refusal(token: str) -> str | None:
    """Why `token` is refused now (revoked, expired, unknown), or None while it is good; in a
    unit of work of its own (an open event stream re-checks its token with it)."""
    with session_scope() as session:
        found = check_token(session, token=token)
    return None if isinstance(found, User) else found


def tokens_of(session: Session, *, user: User) -> list[ApiToken]:
    stmt = select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id.desc())
    return list(session.scalars(stmt))


def listed_tokens(session: Session, *, user: User) -> list[TokenInfo]:
    """A user's tokens as the API and the account page list them: each with its stored last
    use, or this process's newer one not flushed yet (token_use: reads write nothing), so a
    token just used shows it on either, and the rows stay unchanged."""
    return [
        TokenInfo.model_validate(t).model_copy(
            update={"last_used_at": token_use.last_used(t.id, t.last_used_at)}
        )
        for t in tokens_of(session, user=user)
    ]


def revoke_token_id(session: Session, *, token_id: int, user: User) -> ApiToken | None:
    """Revoke the caller's token (an admin: anyone's); None when there is no such token for
    them (another user's token is reported as missing, not as forbidden). Idempotent."""
    row = session.get(ApiToken, token_id) if 0 < token_id <= MAX_ID else None
    if row is None or (row.user_id != user.id and not user.is_admin):
        return None
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row


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
    # A printed password is seen in a terminal or a log: the admin sets their own first.
    create_user(
        session,
        username=ADMIN_USERNAME,
        password=password or generated or "",
        role=Role.admin,
        must_change_password=generated is not None,
    )
    return generated
