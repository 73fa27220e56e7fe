"""Password-login throttling, counted in the `login_attempts` table so that every API process
(several uvicorn workers, several hosts) shares one allowance.

Two limits, both over a sliding window: failures for one username from one client address
(since that client's last successful login as that user: the owner is not locked out by their
own old typos), and failures from one client address whatever the username (a
password-spraying client). There is deliberately no limit on a username alone: then anyone,
without an account, could lock anyone else (the admin included) out by failing on purpose;
here a guesser only locks themselves. A refused attempt is not recorded and its password is
never checked, so the wait ends when the oldest counted failure leaves the window. Rows older
than the window are deleted as new ones arrive.

The client address is the TCP peer's, or the X-Forwarded-For address only when the peer is one
of the configured `trusted_proxies` (app/main.py): an unconfigured peer cannot pick its own
address and so reset its counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.auth.models import LoginAttempt
from app.settings import Settings
from app.timeutil import as_utc


@dataclass(frozen=True)
class Throttled:
    retry_after: int  # whole seconds, at least 1
    message: str


def username_key(username: str) -> str:
    """One counter for `Admin`, `admin ` and `admin`."""
    return username.strip().lower()[:255]


def client_key(client: str) -> str:
    return client[:64]


def _wait(times: list[datetime], limit: int, window: timedelta, now: datetime) -> float | None:
    """`times` newest first; None when fewer than `limit` failures are in the window."""
    if limit <= 0 or len(times) < limit:
        return None
    return (as_utc(times[limit - 1]) + window - now).total_seconds()


def check(
    session: Session, *, username: str, client: str, now: datetime, settings: Settings
) -> Throttled | None:
    window = timedelta(seconds=settings.login_window_seconds)
    since = now - window
    user = username_key(username)
    peer = client_key(client)
    last_success = session.scalar(
        select(func.max(LoginAttempt.at)).where(
            LoginAttempt.username == user,
            LoginAttempt.client == peer,
            LoginAttempt.succeeded.is_(True),
        )
    )
    user_since = max(since, as_utc(last_success)) if last_success is not None else since
    by_user = list(
        session.scalars(
            select(LoginAttempt.at)
            .where(
                LoginAttempt.username == user,
                LoginAttempt.client == peer,
                LoginAttempt.succeeded.is_(False),
                LoginAttempt.at > user_since,
            )
            .order_by(LoginAttempt.at.desc())
            .limit(max(settings.login_max_failures, 1))
        )
    )
    by_client = list(
        session.scalars(
            select(LoginAttempt.at)
            .where(
                LoginAttempt.client == peer,
                LoginAttempt.succeeded.is_(False),
                LoginAttempt.at > since,
            )
            .order_by(LoginAttempt.at.desc())
            .limit(max(settings.login_max_failures_per_client, 1))
        )
    )
    user_wait = _wait(by_user, settings.login_max_failures, window, now)
    client_wait = _wait(by_client, settings.login_max_failures_per_client, window, now)
    waits = [w for w in (user_wait, client_wait) if w is not None]
    if not waits:
        return None
    seconds = max(1, math.ceil(max(waits)))
    if user_wait is not None and user_wait >= (client_wait or 0):
        what = f"{settings.login_max_failures} failed logins for this user from your address"
    else:
        what = f"{settings.login_max_failures_per_client} failed logins from your address"
    minutes = settings.login_window_seconds / 60
    return Throttled(
        retry_after=seconds,
        message=f"too many failed logins ({what} within {minutes:g} minutes): "
        f"try again in {seconds} seconds",
    )


def record(
    session: Session,
    *,
    username: str,
    client: str,
    succeeded: bool,
    now: datetime,
    settings: Settings,
) -> None:
    session.execute(
        delete(LoginAttempt).where(
            LoginAttempt.at < now - timedelta(seconds=settings.login_window_seconds)
        )
    )
    session.add(
        LoginAttempt(
            username=username_key(username),
            client=client_key(client),
            succeeded=succeeded,
            at=now,
        )
    )
    session.flush()


def forget(session: Session, *, username: str) -> None:
    """The user's attempts, so a reset password is not refused for failures before it (the
    admin CLI's reset: app/cli/admin.py)."""
    session.execute(delete(LoginAttempt).where(LoginAttempt.username == username_key(username)))
