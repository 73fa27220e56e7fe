"""What a running run is doing, and how long each part took: its environment build apart from
its training (issue 29). One derivation, used by the API (app/runs/files/out.py) and the run's
event stream (app/runs/streams/events.py), so the CLI and the page say the same.

The columns are written here (`building`, `build_progress`, `training`, each only while the
attempt still owns the run: app.runs.state.lifecycle's conditional UPDATE):
a running run is "starting" (its code copied, its environment looked up) until either its
environment's build begins, "building environment" until its job starts, then "training";
a run without packages goes from "starting" to "training" at once. The duration
counts from the job's start, the build's seconds from the build's start to the job's (or to
the run's end, when the build failed or was cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.runs.state.lifecycle import running_as, took_effect
from app.timeutil import as_utc, utcnow

STARTING = "starting"
BUILDING = "building environment"
TRAINING = "training"


@dataclass(frozen=True)
class Phase:
    phase: str | None  # STARTING, BUILDING, TRAINING; None when the run is not running
    env_build_seconds: float | None  # None: no build (yet)
    duration_seconds: float | None  # from the job's start; None: it never started


def _utc(value: datetime | None) -> datetime | None:
    return as_utc(value) if value is not None else None


def phase_of(run: Any, now: datetime | None = None) -> Phase:
    """From a Run (or a row with status, finished_at and the three phase columns)."""
    now = now or utcnow()
    status = str(getattr(run.status, "value", run.status))
    build = _utc(run.env_build_started_at)
    training = _utc(run.training_started_at)
    end = _utc(run.finished_at) or now
    phase = None
    if status == "running":
        if training is not None:
            phase = TRAINING
        else:
            phase = STARTING if build is None else BUILDING
    build_seconds = None
    if build is not None:
        build_seconds = max(((training or end) - build).total_seconds(), 0.0)
    duration = max((end - training).total_seconds(), 0.0) if training is not None else None
    return Phase(phase, build_seconds, duration)


MAX_BUILD_LINE = 500


def building(session: Session, *, run_id: int, attempt: int, now: datetime | None = None) -> bool:
    """The attempt's environment build began (its phase is "building environment" until
    `training`); False when the run is not this attempt's any more."""
    return took_effect(
        session,
        running_as(run_id, attempt).values(
            env_build_started_at=now or utcnow(), env_build_line=None
        ),
    )


def build_progress(session: Session, *, run_id: int, attempt: int, line: str) -> bool:
    """pip's last line while the attempt's environment builds (shown as the run's phase)."""
    return took_effect(
        session, running_as(run_id, attempt).values(env_build_line=line[:MAX_BUILD_LINE])
    )


def training(session: Session, *, run_id: int, attempt: int, now: datetime | None = None) -> bool:
    """The attempt's job starts: the run's duration counts from here, not from the build."""
    return took_effect(
        session, running_as(run_id, attempt).values(training_started_at=now or utcnow())
    )
