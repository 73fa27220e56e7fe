from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.security import OAuth2PasswordRequestForm

from app.auth.deps import CurrentUser
from app.auth.schemas import TokenOut, UserOut
from app.auth.service import authenticate, issue_token
from app.db import SessionDep
from app.errors import unauthorized
from app.settings import get_settings

router = APIRouter(prefix="/api", tags=["auth"])


@router.post("/auth/token", response_model=TokenOut)
def login_for_token(
    session: SessionDep, form: Annotated[OAuth2PasswordRequestForm, Depends()]
) -> TokenOut:
    user = authenticate(session, username=form.username, password=form.password)
    if user is None:
        raise unauthorized("incorrect username or password")
    token = issue_token(session, user=user, ttl_hours=get_settings().token_ttl_hours)
    return TokenOut(access_token=token)


@router.get("/me", response_model=UserOut)
def read_me(user: CurrentUser) -> UserOut:
    return UserOut(id=user.id, username=user.username, is_admin=user.is_admin)
