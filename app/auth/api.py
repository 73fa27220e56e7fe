from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response, status
from fastapi.security import OAuth2PasswordRequestForm

from app.auth.deps import CurrentUser, request_token
from app.auth.schemas import TokenCreate, TokenCreated, TokenInfo, TokenOut
from app.auth.service import (
    LoginRefused,
    create_token,
    issue_token,
    listed_tokens,
    password_login,
    revoke_token_id,
    token_expiry,
)
from app.db import SessionDep
from app.errors import Invalid, NotFound, TooMany, Unauthorized
from app.http_errors import error_responses
from app.settings import get_settings
from app.timeutil import utcnow
from app.users.schemas import UserOut

router = APIRouter(prefix="/api", tags=["auth"])


def client_address(request: Request) -> str:
    """The peer's address; behind a proxy listed in `trusted_proxies`, the address it
    forwarded (X-Forwarded-For, applied in app/main.py); no other peer can choose its own."""
    return request.client.host if request.client else "unknown"


@router.post(
    "/auth/token",
    response_model=TokenOut,
    responses=error_responses(401, 429),
)
def login_for_token(
    request: Request, session: SessionDep, form: Annotated[OAuth2PasswordRequestForm, Depends()]
) -> TokenOut:
    settings = get_settings()
    try:
        user = password_login(
            session,
            username=form.username,
            password=form.password,
            client=client_address(request),
            settings=settings,
        )
    except LoginRefused as exc:
        if exc.retry_after is None:
            raise Unauthorized(exc.message) from None
        raise TooMany(exc.message, retry_after=exc.retry_after) from None
    token = issue_token(session, user=user, ttl_hours=settings.token_ttl_hours)
    return TokenOut(access_token=token)


@router.get("/me", response_model=UserOut)
def read_me(user: CurrentUser) -> UserOut:
    """The same as GET /api/users/me."""
    return UserOut.of(user)


@router.get("/tokens", response_model=list[TokenInfo])
def list_tokens(session: SessionDep, user: CurrentUser) -> list[TokenInfo]:
    """Your tokens (browser sessions included), newest first; secrets are never shown again."""
    return listed_tokens(session, user=user)


@router.post(
    "/tokens",
    status_code=status.HTTP_201_CREATED,
    response_model=TokenCreated,
    responses=error_responses(400),
)
def create_api_token(
    request: Request, data: TokenCreate, session: SessionDep, user: CurrentUser
) -> TokenCreated:
    """A named token for a script or the CLI. The response is the only time its secret is
    shown: only a hash is stored. It lives at most `token_max_ttl_hours`, and never past the
    token this request came with: a leaked token cannot mint itself a longer-lived heir (asked
    for a longer life, 422; given no life, the parent's remaining one)."""
    settings = get_settings()
    ttl = data.ttl_hours if data.ttl_hours is not None else settings.token_ttl_hours
    if ttl > settings.token_max_ttl_hours:
        raise _ttl_error(f"a token may live at most {settings.token_max_ttl_hours:g} hours", data)
    parent = request_token(request)
    parent_expiry = token_expiry(session, token=parent) if parent else None
    now = utcnow()
    left = max(0.0, (parent_expiry - now).total_seconds() / 3600) if parent_expiry else 0.0
    if parent_expiry is not None and data.ttl_hours is None:
        # The default life, cut to what the parent has left (a fresh login's token has the
        # same default life, and asked for nothing in particular).
        ttl = min(ttl, left)
    if parent_expiry is not None and ttl > left:
        raise _ttl_error(
            "a token may not outlive the token that creates it: this one expires at "
            f"{parent_expiry.isoformat()} (ask for at most {left:.2f} hours, or log in again)",
            data,
        )
    row, secret = create_token(session, user=user, ttl_hours=ttl, name=data.name)
    return TokenCreated(
        **TokenInfo.model_validate(row).model_dump(), access_token=secret, token_type="bearer"
    )


def _ttl_error(message: str, data: TokenCreate) -> Invalid:
    return Invalid.at(["body", "ttl_hours"], message, data.ttl_hours, kind="less_than_equal")


@router.delete(
    "/tokens/{token_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=error_responses(401, 404),
)
def revoke_api_token(token_id: int, session: SessionDep, user: CurrentUser) -> Response:
    """Revoke one of your tokens (admins: anyone's). It is refused from then on."""
    if revoke_token_id(session, token_id=token_id, user=user) is None:
        raise NotFound.of("token", token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
