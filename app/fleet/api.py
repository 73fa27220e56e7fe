"""GET /api/fleet: GPU-hours, mean utilisation, idle GPU-hours and runs waiting per user over
a window (app.fleet.service). Admins get every user's row, anyone else only their own."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from app.auth.deps import CurrentUser
from app.auth.models import User
from app.db import SessionDep
from app.fleet.schemas import WINDOWS, FleetOut, Window
from app.fleet.service import fleet
from app.settings import get_settings
from app.timeutil import utcnow

router = APIRouter(prefix="/api", tags=["fleet"])


def fleet_report(session: Session, user: User, window: Window) -> FleetOut:
    """The window's report as ``user`` may see it (an admin: everyone; else their own row)."""
    now = utcnow()
    since = now - timedelta(hours=WINDOWS[window])
    below = get_settings().gpu_idle_below_percent
    owner_id = None if user.is_admin else user.id
    users = fleet(session, since=since, until=now, now=now, below=below, owner_id=owner_id)
    return FleetOut(window=window, since=since, until=now, idle_below_percent=below, users=users)


@router.get("/fleet", response_model=FleetOut)
def read_fleet(
    session: SessionDep,
    user: CurrentUser,
    window: Annotated[Window, Query(description="24h, 7d or 30d, up to now")] = "7d",
) -> FleetOut:
    """Per user over the window: GPU-hours, mean GPU utilisation, idle GPU-hours (held while
    below the idle threshold) and runs waiting now. Admins see everyone, others themselves."""
    return fleet_report(session, user, window)
