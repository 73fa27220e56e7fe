"""Authentication dependencies: every protected route takes `CurrentUser` (API) or
`BrowserUser` (HTML pages).

The API takes a bearer token, or the browser's session cookie. A cookie is sent by the
browser on its own, so a request that changes something and is authenticated by the cookie
must also carry the CSRF token (double submit: the `ty_csrf` cookie's value in the
`X-CSRF-Token` header, or a `csrf_token` form field for HTML forms), which another site
cannot read.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.auth.models import User
from app.auth.service import check_token
from app.db import SessionDep
from app.errors import Forbidden, Unauthorized
from app.settings import get_settings

SESSION_COOKIE = "ty_session"
CSRF_COOKIE = "ty_csrf"
# Over TLS (settings.tls) both cookies are Secure and carry this prefix: the browser then only
# accepts them from this exact host over HTTPS, path /, no Domain (a sibling subdomain or a
# plain-HTTP page cannot plant or overwrite them).
HOST_PREFIX = "__Host-"


def session_cookie() -> str:
    return (HOST_PREFIX if get_settings().tls else "") + SESSION_COOKIE


def csrf_cookie() -> str:
    return (HOST_PREFIX if get_settings().tls else "") + CSRF_COOKIE


CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_bearer = HTTPBearer(auto_error=False, description="A token from POST /api/auth/token")


# A user whose password was generated (User.must_change_password) may change it, and ask who
# they are (the answer says they must change it: `torchyard login` reads it), on the API, and
# open these pages; everything else is 403 (API) or leads to the account page.
PASSWORD_CHANGE_PATH = "/api/users/me/password"
PASSWORD_CHANGE_API = frozenset({PASSWORD_CHANGE_PATH, "/api/me", "/api/users/me"})
PASSWORD_CHANGE_PAGES = frozenset({"/account", "/account/password", "/logout"})
MUST_CHANGE_PASSWORD = (
    "your password was generated for you and must be changed before anything else: "
    f"POST {PASSWORD_CHANGE_PATH} with current_password and new_password "
    "(or `torchyard users passwd`, or the account page)"
)


class PasswordChangeRequired(Exception):
    """Raised by page dependencies; the app turns it into a redirect to the account page."""


class LoginRequired(Exception):
    """Raised by page dependencies; the app turns it into a redirect to the login page."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


async def csrf_ok(request: Request) -> bool:
    expected = request.cookies.get(csrf_cookie())
    if not expected:
        return False
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        form = await request.form()
        try:
            sent = str(form.get("csrf_token", ""))
        finally:
            await form.close()  # a multipart form's files (an upload sent without the header)
    return sent is not None and secrets.compare_digest(sent, expected)


async def _check(session: Session, token: str) -> User | str:
    """check_token in the thread pool: it queries the database, and these dependencies are
    async (CSRF reads the form). On the event loop, 20 viewers opening streams at once took
    every pooled connection and the loop then waited for one only it could give back: the
    whole server stalled (bench/load.py --stagger 0)."""
    return await run_in_threadpool(check_token, session, token=token)


async def _cookie_user(request: Request, session: SessionDep) -> User | str | None:
    """The session cookie's user, why its token is refused, or None without a cookie."""
    token = request.cookies.get(session_cookie())
    if not token:
        return None
    user = await _check(session, token)
    if isinstance(user, User) and request.method not in SAFE_METHODS and not await csrf_ok(request):
        raise Forbidden(
            "missing or wrong CSRF token: send the ty_csrf cookie's value in "
            f"the {CSRF_HEADER} header"
        )
    return user


async def get_current_user(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    user: User | str | None
    if credentials is not None:
        user = await _check(session, credentials.credentials)
    else:
        user = await _cookie_user(request, session)
    if user is None:
        raise Unauthorized("not authenticated: send 'Authorization: Bearer <token>'")
    if isinstance(user, str):
        raise Unauthorized(user)
    if user.must_change_password and request.url.path not in PASSWORD_CHANGE_API:
        raise Forbidden(MUST_CHANGE_PASSWORD)
    return user


def request_token(request: Request) -> str | None:
    """The token this request authenticated with: the bearer token, else the session cookie."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return value.strip()
    return request.cookies.get(session_cookie())


async def get_browser_user(request: Request, session: SessionDep) -> User:
    user = await _cookie_user(request, session)
    if not isinstance(user, User):
        raise LoginRequired(
            str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        )
    if user.must_change_password and request.url.path not in PASSWORD_CHANGE_PAGES:
        raise PasswordChangeRequired()
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]
BrowserUser = Annotated[User, Depends(get_browser_user)]
