"""The run's check-in (worker/heartbeat.py), which the one supervision loop asks every round
(worker/supervision.py): its answer is explicit (app.runs.state.answers.Standing) and the loop
over a job (worker.watch) acts on it, with a real job process and the suite's database."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sqlalchemy import update

from app.db import session_scope
from app.runs.models import Run
from app.runs.state import lifecycle
from app.runs.state.answers import CancelOutcome, Standing
from app.timeutil import utcnow
from tests.factories import make_run
from torchyard.contract import JOB_TOKEN_VAR, METRICS_FILE
from worker.heartbeat import Heartbeat, Watched, stops_as_cancelled
from worker.launcher import Launch
from worker.process import JobProcess
from worker.supervision import StopReason
from worker.watch import watch


def started_run(tmp_path: Path) -> Watched:
    run_id = make_run(status="queued")
    with session_scope() as session:
        assert lifecycle.start(
            session, run_id=run_id, host="hb", gpu_indices="", started_at=utcnow()
        )
        session.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=None))
    return Watched(run_id, 1, tmp_path / METRICS_FILE, has_leases=False)


def heartbeat_at(run_id: int) -> object:
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.heartbeat_at


def test_the_heartbeat_stamps_only_when_due_and_answers_every_time(tmp_path: Path) -> None:
    run = started_run(tmp_path)
    heartbeat = Heartbeat(run)
    assert heartbeat.check() is Standing.OWNED  # the loop just started: no beat due yet
    assert heartbeat_at(run.run_id) is None
    heartbeat.every = 0.0
    assert heartbeat.check() is Standing.OWNED
    assert heartbeat_at(run.run_id) is not None


def test_a_handover_under_the_worker_is_answered_every_time(tmp_path: Path) -> None:
    run = started_run(tmp_path)
    with session_scope() as session:
        assert lifecycle.requeue(
            session, run_id=run.run_id, attempt=1, resume_from=None, reason="worker lost"
        )
    heartbeat = Heartbeat(run)
    assert heartbeat.check() is Standing.NOT_OWNED
    assert heartbeat.check() is Standing.NOT_OWNED
    assert not stops_as_cancelled(Standing.NOT_OWNED)  # the job is stopped, the run not ended
    assert stops_as_cancelled(Standing.CANCEL_REQUESTED) and stops_as_cancelled(Standing.DELETED)


# A job that ends when the test creates its file (waits on that condition, not a time).
WAIT_FOR_FILE = (
    "import pathlib, sys, time\n"
    "p = pathlib.Path(sys.argv[1])\n"
    "while not p.exists(): time.sleep(0.02)\n"
)


def job_waiting_for(tmp_path: Path, flag: Path) -> JobProcess:
    token = f"hb-{os.getpid()}-{flag.name}"
    return JobProcess(
        Launch(
            argv=[sys.executable, "-c", WAIT_FOR_FILE, str(flag)],
            env={**os.environ, JOB_TOKEN_VAR: token},
            cwd=tmp_path,
        ),
        log_path=tmp_path / "job.log",
        cwd=tmp_path,
        token=token,
        stop_grace_seconds=1.0,
    )


def test_the_watch_loop_stops_a_handed_over_attempts_job_at_once(tmp_path: Path) -> None:
    """Fencing (issue 27): once the server answers that the run is no longer this attempt's,
    the job is stopped without a grace (the GPUs may be another attempt's now), whole."""
    run = started_run(tmp_path)
    with session_scope() as session:
        assert lifecycle.requeue(
            session, run_id=run.run_id, attempt=1, resume_from=None, reason="worker lost"
        )
    with job_waiting_for(tmp_path, tmp_path / "never") as job:
        assert watch(run, job, interval=0.05, grace=30.0) is StopReason.FENCED
        assert job.poll() is not None and job.members() == []
    with session_scope() as session:  # the run stays the next attempt's
        requeued = session.get(Run, run.run_id)
        assert requeued is not None and requeued.attempt == 2 and requeued.status == "queued"


def test_the_watch_loop_stops_the_job_of_a_cancelled_run(tmp_path: Path) -> None:
    run = started_run(tmp_path)
    with job_waiting_for(tmp_path, tmp_path / "never") as job:
        with session_scope() as session:
            assert lifecycle.cancel(session, run_id=run.run_id) is CancelOutcome.REQUESTED
        assert watch(run, job, interval=0.05, grace=1.0) is StopReason.CANCEL
        assert job.poll() is not None
