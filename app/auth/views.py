"""Browser login and logout: a session cookie holding an API token, plus a CSRF cookie."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.auth.deps import CSRF_COOKIE, SESSION_COOKIE, BrowserUser
from app.auth.service import authenticate, issue_token, revoke_token
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
    user = authenticate(session, username=username, password=password)
    if user is None:
        return render(
            request,
            "login.html",
            user=None,
            next=_safe_next(next),
            error="Incorrect username or password.",
            status_code=401,
        )
    settings = get_settings()
    token = issue_token(session, user=user, ttl_hours=settings.token_ttl_hours, name="browser")
    response = RedirectResponse(_safe_next(next), status_code=303)
    max_age = int(settings.token_ttl_hours * 3600)
    response.set_cookie(SESSION_COOKIE, token, max_age=max_age, httponly=True, samesite="lax")
    response.set_cookie(CSRF_COOKIE, secrets.token_urlsafe(24), max_age=max_age, samesite="strict")
    return response


@router.post("/logout")
def logout(request: Request, session: SessionDep, _user: BrowserUser) -> RedirectResponse:
    """BrowserUser has already checked the CSRF token (this is a write)."""
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        revoke_token(session, token=token)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    response.delete_cookie(CSRF_COOKIE)
    return response
