"""Every periodic job of the app's domains (app.periodic), for the API's lifespan and the
worker to start: one list, so that a new domain's job is added in one place."""

from __future__ import annotations

from app.auth import scheduled as auth
from app.notifications import scheduled as notifications
from app.periodic import Job
from app.runs.state import scheduled as runs
from app.sessions import end_rules as sessions
from app.sweeps import scheduled as sweeps

JOBS: tuple[Job, ...] = (
    runs.REAP,
    runs.RESEND,
    notifications.CHECKS,
    notifications.DELIVER,
    sweeps.ADVANCE,
    auth.FLUSH_TOKEN_USE,
    sessions.CHECK,
)
