"""The fair-share API (issue 42): every signed-in user reads each user's share; admins set a
user's weight (the GPU page's form and `torchyard users share-weight` call the same)."""

from __future__ import annotations

from fastapi import APIRouter

from app.auth.deps import CurrentUser
from app.db import SessionDep
from app.gpus import fairshare
from app.gpus.fleet_view import queued_runs
from app.gpus.schemas import FairShareOut, ShareWeightIn, UserShareOut
from app.http_errors import error_responses
from app.timeutil import utcnow
from app.users import service
from app.users.api import Admin

router = APIRouter(prefix="/api/fair-share", tags=["gpus"])


@router.get("", response_model=FairShareOut)
def read_fair_share(session: SessionDep, _user: CurrentUser) -> FairShareOut:
    """Each user running, waiting or with usage left: decayed GPU-hours, weight, effective
    usage and due share (also when fair share is off: `half_life_hours` is 0 then)."""
    return fairshare.table(fairshare.shares(session, now=utcnow()), queued_runs(session))


# 400: a body that is not even JSON text
@router.put(
    "/users/{user_id}", response_model=UserShareOut, responses=error_responses(400, 403, 404)
)
def set_share_weight(
    user_id: int, data: ShareWeightIn, session: SessionDep, _admin: Admin
) -> UserShareOut:
    """Sets the user's weight (> 0, 422 naming `weight` otherwise; null: their role's
    again) and answers their share now."""
    user = service.get_user(session, user_id)
    service.set_share_weight(session, user=user, weight=data.weight)
    return fairshare.row(fairshare.shares(session, now=utcnow())[user.id])
