"""Who an MLflow client is: ``MLFLOW_TRACKING_TOKEN`` arrives as ``Authorization: Bearer`` (a
torchyard token), ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` as HTTP Basic (a password login,
behind the login rate limit like any other).

A client sends its Basic credentials on every request, and a password check costs tens of
milliseconds of argon2 by design: a script logging a batch per step would spend more time
being checked than logging. A login that succeeded is remembered for BASIC_TTL_SECONDS under
an HMAC of the pair (a key of this process only, so the memory holds no password and nothing
usable elsewhere); a changed password or a deactivated user is seen within that time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
import time
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.auth.api import client_address
from app.auth.models import User
from app.auth.service import LoginRefused, check_token, password_login
from app.db import SessionDep
from app.mlflow.errors import REQUEST_LIMIT_EXCEEDED, UNAUTHENTICATED, MlflowError, denied
from app.settings import get_settings

BASIC_TTL_SECONDS = 60.0
_MAX_REMEMBERED = 1024
_KEY = secrets.token_bytes(32)
_remembered: dict[bytes, tuple[int, float]] = {}
_lock = threading.Lock()


def _unauthenticated(message: str) -> MlflowError:
    return MlflowError(UNAUTHENTICATED, message)


def _basic_user(session: Session, request: Request, encoded: str) -> User:
    try:
        username, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise _unauthenticated("malformed Basic credentials") from None
    if not sep:
        raise _unauthenticated("malformed Basic credentials")
    mark = hmac.new(_KEY, f"{username}\x00{password}".encode(), hashlib.sha256).digest()
    now = time.monotonic()
    with _lock:
        seen = _remembered.get(mark)
    if seen is not None and now - seen[1] < BASIC_TTL_SECONDS:
        user = session.get(User, seen[0])
        if user is not None and user.is_active:
            return user
    try:
        user = password_login(
            session,
            username=username,
            password=password,
            client=client_address(request),
            settings=get_settings(),
        )
    except LoginRefused as exc:
        code = REQUEST_LIMIT_EXCEEDED if exc.retry_after else UNAUTHENTICATED
        raise MlflowError(code, exc.message) from None
    with _lock:
        if len(_remembered) >= _MAX_REMEMBERED:
            _remembered.clear()
        _remembered[mark] = (user.id, now)
    return user


def mlflow_user(request: Request, session: SessionDep) -> User:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer" and value.strip():
        found = check_token(session, token=value.strip())
        if isinstance(found, str):
            raise _unauthenticated(found)
        return found
    if scheme == "basic" and value.strip():
        return _basic_user(session, request, value.strip())
    raise _unauthenticated(
        "not authenticated: set MLFLOW_TRACKING_TOKEN to a torchyard token "
        "(or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)"
    )


def mlflow_writer(user: Annotated[User, Depends(mlflow_user)]) -> User:
    if not user.can_write:
        raise denied(f"your role is {user.role}: viewers may read but not log")
    return user


MlflowUser = Annotated[User, Depends(mlflow_user)]
MlflowWriter = Annotated[User, Depends(mlflow_writer)]
