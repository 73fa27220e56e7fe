"""The users API: `GET /api/users/me` and your own password for everyone; listing, adding,
changing the role of, disabling and setting the password of users for admins."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response, status

from app.auth.deps import CurrentUser, request_token
from app.auth.models import User
from app.auth.security import generate_password
from app.db import SessionDep
from app.errors import Forbidden
from app.http_errors import error_responses
from app.runs.files.disk import disk_by_owner
from app.users import service
from app.users.schemas import PasswordChange, UserCreate, UserCreated, UserOut, UserUpdate

router = APIRouter(prefix="/api/users", tags=["users"])


def get_admin(user: CurrentUser) -> User:
    if not user.is_admin:
        raise Forbidden(f"only admins manage users (your role is {user.role})")
    return user


Admin = Annotated[User, Depends(get_admin)]
ADMIN_ONLY = error_responses(403)


@router.get("/me", response_model=UserOut)
def read_me(user: CurrentUser, session: SessionDep) -> UserOut:
    return UserOut.of(user, disk_bytes=disk_by_owner(session, [user.id]).get(user.id, 0))


@router.post(
    "/me/password",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=error_responses(400, 403),  # 400: a body that is not even JSON text
)
def change_my_password(
    request: Request, data: PasswordChange, session: SessionDep, user: CurrentUser
) -> Response:
    """422 naming `current_password` when it is wrong, `new_password` when it is too short.
    Your other browser sessions end; this request's token and your API tokens stay."""
    service.change_own_password(
        session,
        user=user,
        current_password=data.current_password,
        new_password=data.new_password,
        current_token=request_token(request),
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("", response_model=list[UserOut], responses=ADMIN_ONLY)
def list_users(session: SessionDep, _admin: Admin) -> list[UserOut]:
    found = service.list_users(session)
    disks = disk_by_owner(session, [u.id for u in found])
    return [UserOut.of(u, disk_bytes=disks.get(u.id, 0)) for u in found]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=UserCreated,
    responses=error_responses(400, 403, 409),
)
def create_user(data: UserCreate, session: SessionDep, _admin: Admin) -> UserCreated:
    """Without `password`, one is generated and answered in `password` (this once); the user
    must change it at the first login, as any password an admin sets for someone else."""
    generated = generate_password() if data.password is None else None
    user = service.add_user(
        session,
        username=data.username,
        password=generated or data.password or "",
        role=data.role,
        temporary=generated is not None,
    )
    return UserCreated(**UserOut.of(user).model_dump(), password=generated)


@router.patch(
    "/{user_id}",
    response_model=UserOut,
    responses=error_responses(400, 403, 404, 409),  # 409: the last active admin
)
def update_user(user_id: int, data: UserUpdate, session: SessionDep, admin: Admin) -> UserOut:
    """Disabling ends the user's tokens and sessions at once; their runs keep running. A
    password set for someone else must be changed by them at their next login."""
    user = service.get_user(session, user_id)
    if data.password is not None:
        service.set_password(
            session, user=user, password=data.password, temporary=user.id != admin.id
        )
    if data.role is not None:
        service.set_role(session, user=user, role=data.role)
    if data.disabled is not None:
        service.set_disabled(session, user=user, disabled=data.disabled)
    return UserOut.of(user)
