"""Authentication dependencies: every protected route takes `CurrentUser`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.auth.models import User
from app.auth.service import user_for_token
from app.db import SessionDep
from app.errors import unauthorized

_bearer = HTTPBearer(auto_error=False, description="A token from POST /api/auth/token")


def get_current_user(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    if credentials is None:
        raise unauthorized("not authenticated: send 'Authorization: Bearer <token>'")
    user = user_for_token(session, token=credentials.credentials)
    if user is None:
        raise unauthorized("invalid, expired or revoked token")
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]
