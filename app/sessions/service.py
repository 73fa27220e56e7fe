"""Sessions: started through the runs' own path (app.runs.service.create_run: queue, priority,
ceilings, quota, pools), so the scheduler leases their GPUs like any run's; extended while
nothing waits for GPUs. Flush, never commit."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.errors import Conflict, Invalid
from app.experiments.config.model import MAX_SESSION_HOURS, SESSION_TAG
from app.experiments.config.validate import validate_config
from app.experiments.models import Experiment
from app.experiments.service import add_experiment
from app.ownership import find_experiment
from app.runs import service as runs
from app.runs.models import Run, RunStatus
from app.runs.state import notices
from app.sessions.schemas import SessionCreate
from app.timeutil import as_utc

# Each member's own experiment for sessions started without one.
SESSIONS_EXPERIMENT = "sessions"


def is_session(run: Run) -> bool:
    return isinstance(run.config, dict) and SESSION_TAG in run.config


def hours(run: Run) -> float:
    """Its time limit: the hours it asked for and those it was extended by."""
    part = run.config.get(SESSION_TAG) or {}
    extra = notices.session_part(run.notices).get("extra_hours", 0)
    return float(part.get("hours", 0)) + float(extra)


def ends_at(run: Run) -> datetime | None:
    """When its time limit ends it (None until it has started)."""
    if run.started_at is None:
        return None
    return as_utc(run.started_at) + timedelta(hours=hours(run))


def start(session: Session, *, owner: User, data: SessionCreate) -> Run:
    """A queued session run: a session config built from the request, in the member's
    experiment (or their own ``sessions`` one, made on first use)."""
    experiment = _experiment(session, owner, data.experiment_id)
    overrides: dict[str, Any] = {
        SESSION_TAG: {"hours": data.hours},
        "resources": {"gpus": data.gpus},
        "environment": {"requirements": list(data.requirements)},
    }
    if data.code is not None:
        overrides["code"] = data.code
    return runs.create_run(
        session,
        experiment=experiment,
        owner=owner,
        overrides=overrides,
        priority=data.priority,
        base={SESSION_TAG: {}},
    )


def _experiment(session: Session, owner: User, experiment_id: int | None) -> Experiment:
    if experiment_id is not None:
        return find_experiment(experiment_id, session, owner, write=False)
    found = session.scalar(
        select(Experiment)
        .where(Experiment.owner_id == owner.id, Experiment.name == SESSIONS_EXPERIMENT)
        .order_by(Experiment.id)
        .limit(1)
    )
    if found is not None:
        return found
    config = validate_config({SESSION_TAG: {}}, loc_prefix=("body",))
    return add_experiment(session, owner_id=owner.id, name=SESSIONS_EXPERIMENT, config=config)


def extend(session: Session, *, run: Run, more_hours: float) -> Run:
    """More time, while the session runs and no run waits for GPUs (409 otherwise)."""
    if not is_session(run):
        raise Invalid.at(["path", "run_id"], f"run {run.id} is not a session", run.id)
    if run.status is not RunStatus.running:
        raise Conflict(f"session {run.id} is not running ({run.status.value})")
    waiting = next(
        (
            r.id
            for r in session.scalars(select(Run).where(Run.status == RunStatus.queued))
            if int((r.config.get("resources") or {}).get("gpus", 0)) > 0
        ),
        None,
    )
    if waiting is not None:
        raise Conflict(f"run {waiting} waits for GPUs: a session cannot be extended meanwhile")
    total = hours(run) + more_hours
    if total > MAX_SESSION_HOURS:
        raise Invalid.at(
            ["body", "hours"],
            f"a session may last at most {MAX_SESSION_HOURS} hours in all",
            more_hours,
        )
    extra = notices.session_part(run.notices).get("extra_hours", 0)
    # A new warning comes 10 minutes before the new end.
    notices.session_note(run, extra_hours=float(extra) + more_hours, warning=None)
    session.flush()
    return run
