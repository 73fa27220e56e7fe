"""Browser login and logout: a session cookie holding an API token, plus a CSRF cookie."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.auth.api import client_address
from app.auth.deps import BrowserUser, csrf_cookie, session_cookie
from app.auth.service import (
    BROWSER_SESSION,
    LoginRefused,
    issue_token,
    password_login,
    revoke_token,
)
from app.db import SessionDep
from app.settings import get_settings
from app.templating import render

router = APIRouter(include_in_schema=False)


def _safe_next(next_url: str | None) -> str:
    """Only same-site paths: a login link must not bounce the user to another site."""
    if next_url and next_url.startswith("/") and not next_url.startswith("//"):
        return next_url
    return "/"


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/") -> HTMLResponse:
    return render(request, "login.html", user=None, next=_safe_next(next), error=None)


@router.post("/login", response_model=None)
def login(
    request: Request,
    session: SessionDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/",
) -> Response:
    settings = get_settings()
    try:
        user = password_login(
            session,
            username=username,
            password=password,
            client=client_address(request),
            settings=settings,
        )
    except LoginRefused as exc:
        page = render(
            request,
            "login.html",
            user=None,
            next=_safe_next(next),
            username=username,
            error=exc.message[0].upper() + exc.message[1:] + ".",
            status_code=401 if exc.retry_after is None else 429,
        )
        if exc.retry_after is not None:
            page.headers["Retry-After"] = str(exc.retry_after)
        return page
    token = issue_token(
        session, user=user, ttl_hours=settings.token_ttl_hours, name=BROWSER_SESSION
    )
    response = RedirectResponse(_safe_next(next), status_code=303)
    max_age = int(settings.token_ttl_hours * 3600)
    secure = settings.tls
    response.set_cookie(
        session_cookie(), token, max_age=max_age, httponly=True, samesite="lax", secure=secure
    )
    response.set_cookie(
        csrf_cookie(), secrets.token_urlsafe(24), max_age=max_age, samesite="strict", secure=secure
    )
    return response


@router.post("/logout")
def logout(request: Request, session: SessionDep, _user: BrowserUser) -> RedirectResponse:
    """BrowserUser has already checked the CSRF token (this is a write)."""
    token = request.cookies.get(session_cookie())
    if token:
        revoke_token(session, token=token)
    response = RedirectResponse("/login", status_code=303)
    secure = get_settings().tls
    response.delete_cookie(session_cookie(), secure=secure, httponly=True, samesite="lax")
    response.delete_cookie(csrf_cookie(), secure=secure, samesite="strict")
    return response
