"""A run logged from outside (app.runs.state.lifecycle open/end/reopen_external): no worker, so no
reaper fails it, a cancel ends it at once, and only its client's transitions apply to it."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.auth.models import User
from app.db import session_scope
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle
from app.runs.state.answers import CancelOutcome
from app.runs.state.recovery import reap_lost_runs
from app.timeutil import utcnow
from tests.conftest import make_user
from tests.factories import add_run


def _external(user_id: int, experiment_id: int) -> int:
    with session_scope() as session:
        run = lifecycle.open_external(
            session,
            experiment_id=experiment_id,
            owner_id=user_id,
            origin="mlflow",
            name="laptop",
            started_at=utcnow() - timedelta(hours=1),
        )
        return run.id


def _owner() -> tuple[int, int]:
    username = make_user()[0]
    with session_scope() as session:
        user_id = session.scalar(select(User.id).where(User.username == username))
        assert user_id is not None
        job = add_run(session, owner_id=user_id, status="succeeded")
        run = session.get(Run, job)
        assert run is not None
        return user_id, run.experiment_id


def test_no_reaper_fails_a_run_logged_from_outside() -> None:
    user_id, experiment_id = _owner()
    run_id = _external(user_id, experiment_id)
    with session_scope() as session:
        handed = reap_lost_runs(session, lost_after_seconds=0, now=utcnow() + timedelta(days=1))
        assert run_id not in {h.run_id for h in handed}
        run = session.get(Run, run_id)
        assert run is not None and run.status == RunStatus.running


def test_its_client_ends_and_reopens_it_and_a_cancel_ends_it_at_once() -> None:
    user_id, experiment_id = _owner()
    run_id = _external(user_id, experiment_id)
    with session_scope() as session:
        assert lifecycle.end_external(
            session, run_id=run_id, status=RunStatus.succeeded, finished_at=utcnow()
        )
        assert not lifecycle.end_external(  # ended already: a second end does nothing
            session, run_id=run_id, status=RunStatus.failed, finished_at=utcnow()
        )
        assert lifecycle.reopen_external(session, run_id=run_id, finished=RunStatus.succeeded)
        assert lifecycle.cancel(session, run_id=run_id) is CancelOutcome.CANCELLED
        run = session.get(Run, run_id, populate_existing=True)
        assert run is not None and run.status == RunStatus.cancelled and run.finished_at


def test_a_job_s_run_is_not_moved_by_the_external_transitions() -> None:
    user_id, _experiment_id = _owner()
    with session_scope() as session:
        job = add_run(session, owner_id=user_id, status="running")
    with session_scope() as session:
        assert not lifecycle.end_external(
            session, run_id=job, status=RunStatus.succeeded, finished_at=utcnow()
        )
        assert lifecycle.cancel(session, run_id=job) is CancelOutcome.REQUESTED  # its worker's
