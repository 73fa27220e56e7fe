"""The ceilings API: `GET /api/ceilings/me` for everyone (what a launch of mine may ask);
the whole table and setting a role's or a user's ceilings for admins."""

from __future__ import annotations

from fastapi import APIRouter

from app.auth.deps import CurrentUser
from app.auth.models import Role, User
from app.db import SessionDep
from app.http_errors import error_responses
from app.users import ceilings, service
from app.users.api import ADMIN_ONLY, Admin
from app.users.schemas import CeilingsIn, CeilingsTable, EffectiveCeilings

router = APIRouter(prefix="/api/ceilings", tags=["users"])


def _out(value: ceilings.Ceilings) -> CeilingsIn:
    return CeilingsIn.model_validate(value.as_dict())


def _in(data: CeilingsIn) -> ceilings.Ceilings:
    return ceilings.Ceilings(**data.model_dump())


@router.get("/me", response_model=EffectiveCeilings)
def read_my_ceilings(user: CurrentUser, session: SessionDep) -> EffectiveCeilings:
    found = ceilings.effective(session, user)
    return EffectiveCeilings(ceilings=_out(found.values), sources=dict(found.sources))


@router.get("", response_model=CeilingsTable, responses=ADMIN_ONLY)
def read_ceilings(session: SessionDep, _admin: Admin) -> CeilingsTable:
    roles, users = ceilings.listed(session)
    names = {u.id: u.username for u in service.list_users(session)}
    return CeilingsTable(
        box=_out(ceilings.box_defaults()),
        roles={role: _out(value) for role, value in roles.items()},
        users={names[uid]: _out(value) for uid, value in users.items() if uid in names},
    )


# 400: a body that is not even JSON text
@router.put("/roles/{role}", response_model=CeilingsIn, responses=error_responses(400, 403))
def set_role_ceilings(
    role: Role, data: CeilingsIn, session: SessionDep, _admin: Admin
) -> CeilingsIn:
    """Replaces the role's ceilings; a null field falls back to the box's default."""
    return _out(ceilings.set_ceilings(session, _in(data), role=role))


@router.put("/users/{user_id}", response_model=CeilingsIn, responses=error_responses(400, 403, 404))
def set_user_ceilings(
    user_id: int, data: CeilingsIn, session: SessionDep, _admin: Admin
) -> CeilingsIn:
    """Replaces the user's own ceilings; a null field falls back to their role's."""
    user: User = service.get_user(session, user_id)
    return _out(ceilings.set_ceilings(session, _in(data), user=user))
