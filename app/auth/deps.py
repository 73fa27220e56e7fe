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

from app.auth.models import User
from app.auth.service import user_for_token
from app.db import SessionDep
from app.errors import forbidden, unauthorized

SESSION_COOKIE = "ty_session"
CSRF_COOKIE = "ty_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_bearer = HTTPBearer(auto_error=False, description="A token from POST /api/auth/token")


class LoginRequired(Exception):
    """Raised by page dependencies; the app turns it into a redirect to the login page."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


async def csrf_ok(request: Request) -> bool:
    expected = request.cookies.get(CSRF_COOKIE)
    if not expected:
        return False
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        sent = str((await request.form()).get("csrf_token", ""))
    return sent is not None and secrets.compare_digest(sent, expected)


async def _cookie_user(request: Request, session: SessionDep) -> User | None:
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    user = user_for_token(session, token=token)
    if user is not None and request.method not in SAFE_METHODS and not await csrf_ok(request):
        raise forbidden(
            "missing or wrong CSRF token: send the ty_csrf cookie's value in "
            f"the {CSRF_HEADER} header"
        )
    return user


async def get_current_user(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    if credentials is not None:
        user = user_for_token(session, token=credentials.credentials)
        if user is None:
            raise unauthorized("invalid, expired or revoked token")
        return user
    user = await _cookie_user(request, session)
    if user is None:
        raise unauthorized("not authenticated: send 'Authorization: Bearer <token>'")
    return user


async def get_browser_user(request: Request, session: SessionDep) -> User:
    user = await _cookie_user(request, session)
    if user is None:
        raise LoginRequired(
            str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        )
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]
BrowserUser = Annotated[User, Depends(get_browser_user)]
