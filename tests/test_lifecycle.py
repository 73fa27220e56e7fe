"""Each transition of a run's status takes effect only from the state it expects (on SQLite
and PostgreSQL). That only app.runs.state.lifecycle writes the status is checked by what every
write of the suite touches (tests/table_owners.py, docs/architecture.md's owners), not here."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

import app.models as models
from app.gpus.models import GpuLease
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle, phase
from app.runs.state.answers import CancelOutcome
from app.runs.state.recovery import HandoverOutcome, hand_over, readopt
from app.timeutil import utcnow
from tests.databases import KINDS, own_database, rolled_back, savepoints_on

REPO = Path(__file__).resolve().parent.parent


# --- each transition and its guard -----------------------------------------------------------


@pytest.fixture(scope="module", params=KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with (
        own_database(request.param, tmp_path_factory.mktemp("life"), "ty_life") as eng,
        savepoints_on(eng) as rollback,
    ):
        yield rollback


@pytest.fixture
def sessions(engine: Engine) -> Iterator[sessionmaker[Session]]:
    """Each `with sessions.begin()` a unit of work that commits (a SAVEPOINT released), all
    of a test's rolled back after it."""
    with rolled_back(engine) as maker:
        yield maker


def queued(maker: sessionmaker[Session], config: dict | None = None) -> int:
    with maker.begin() as s:
        user = models.User(username=f"u-{secrets.token_hex(6)}", password_hash="-")
        s.add(user)
        s.flush()
        exp = models.Experiment(name="life", config={}, owner_id=user.id)
        s.add(exp)
        s.flush()
        config = {"recipe": "tiny_mlp", "seed": 3, **(config or {})}
        run = lifecycle.queue(s, experiment_id=exp.id, owner_id=user.id, config=config)
        assert s.info["after_commit"], "the task is enqueued once the caller commits"
        return run.id


def running(
    maker: sessionmaker[Session], gpus: tuple[int, ...] = (), config: dict | None = None
) -> int:
    run_id = queued(maker, config)
    with maker.begin() as s:
        assert lifecycle.start(
            s, run_id=run_id, host="h", gpu_indices=",".join(map(str, gpus)), started_at=utcnow()
        )
        for index in gpus:
            s.add(GpuLease(host=f"h-{run_id}", gpu_index=index, run_id=run_id))
    return run_id


def row(maker: sessionmaker[Session], run_id: int) -> Run:
    with maker() as s:
        run = s.get(Run, run_id)
        assert run is not None
        return run


def lease_count(maker: sessionmaker[Session], run_id: int) -> int:
    with maker() as s:
        return int(s.scalar(select(func.count()).where(GpuLease.run_id == run_id)) or 0)


def test_a_queued_run_reads_back_as_the_enum(sessions) -> None:
    run = row(sessions, queued(sessions))
    assert run.status is RunStatus.queued and run.seed == 3


def test_start_takes_a_queued_run_once(sessions) -> None:
    run_id = queued(sessions)
    at = utcnow()
    with sessions.begin() as s:
        assert lifecycle.start(s, run_id=run_id, host="h", gpu_indices="0,1", started_at=at)
    with sessions.begin() as s:  # a redelivered task, or a second worker
        assert not lifecycle.start(s, run_id=run_id, host="other", gpu_indices="", started_at=at)
    run = row(sessions, run_id)
    assert (run.status, run.worker_host, run.gpu_indices) == (RunStatus.running, "h", "0,1")
    assert run.started_at is not None and run.heartbeat_at is not None


def test_start_refuses_a_run_whose_cancel_came_first(sessions) -> None:
    run_id = queued(sessions)
    with sessions.begin() as s:
        assert lifecycle.cancel(s, run_id=run_id) is CancelOutcome.CANCELLED
    with sessions.begin() as s:
        assert not lifecycle.start(s, run_id=run_id, host="h", gpu_indices="", started_at=utcnow())
    run = row(sessions, run_id)
    assert run.status is RunStatus.cancelled and run.finished_at is not None


def test_cancel_of_a_running_run_is_a_request_its_worker_finishes(sessions) -> None:
    run_id = running(sessions, gpus=(0,))
    with sessions.begin() as s:
        assert lifecycle.cancel(s, run_id=run_id) is CancelOutcome.REQUESTED
    run = row(sessions, run_id)
    assert run.status is RunStatus.running and run.cancel_requested
    with sessions.begin() as s:
        assert lifecycle.finish(
            s, run_id=run_id, attempt=1, status=RunStatus.cancelled, exit_code=-15, error=None
        )
    assert row(sessions, run_id).status is RunStatus.cancelled
    assert lease_count(sessions, run_id) == 0
    with sessions.begin() as s:
        assert lifecycle.cancel(s, run_id=run_id) is CancelOutcome.FINISHED


def test_pid_and_heartbeat_only_while_the_attempt_runs(sessions) -> None:
    run_id = running(sessions, gpus=(0,))
    with sessions.begin() as s:
        assert lifecycle.record_pid(s, run_id=run_id, attempt=1, pid=4242)
        assert not lifecycle.record_pid(s, run_id=run_id, attempt=2, pid=1)
    assert row(sessions, run_id).pid == 4242
    later = utcnow()
    with sessions.begin() as s:
        assert lifecycle.heartbeat(s, run_id=run_id, attempt=1, renew_leases=True, now=later)
        assert not lifecycle.heartbeat(s, run_id=run_id, attempt=2, renew_leases=True)
    with sessions() as s:
        stamps = s.scalars(select(GpuLease.heartbeat_at).where(GpuLease.run_id == run_id)).all()
    assert len(stamps) == 1 and stamps[0].replace(tzinfo=None) == later.replace(tzinfo=None)


def test_finish_releases_the_leases_with_the_final_status_and_only_once(sessions) -> None:
    run_id = running(sessions, gpus=(0, 1))
    assert lease_count(sessions, run_id) == 2
    with sessions.begin() as s:
        assert lifecycle.finish(
            s, run_id=run_id, attempt=1, status=RunStatus.succeeded, exit_code=0, error=None
        )
    with sessions.begin() as s:  # a late second writer: the run keeps its first final status
        assert not lifecycle.fail(s, run_id=run_id, attempt=1, reason="late")
    run = row(sessions, run_id)
    assert (run.status, run.exit_code, run.error) == (RunStatus.succeeded, 0, None)
    assert lease_count(sessions, run_id) == 0


def test_finish_of_an_attempt_handed_over_leaves_the_next_attempt_alone(sessions) -> None:
    run_id = running(sessions, gpus=(0,))
    with sessions.begin() as s:
        assert lifecycle.requeue(
            s, run_id=run_id, attempt=1, resume_from=f"{run_id}/ckpt.pt", reason="worker lost"
        )
    with sessions.begin() as s:
        assert not lifecycle.requeue(s, run_id=run_id, attempt=1, resume_from=None, reason="x")
    run = row(sessions, run_id)
    assert (run.status, run.attempt, run.resume_from) == (
        RunStatus.queued,
        2,
        f"{run_id}/ckpt.pt",
    )
    assert run.error == "attempt 1: worker lost; requeued as attempt 2"
    assert (run.pid, run.gpu_indices, run.heartbeat_at) == (None, None, None)
    assert lease_count(sessions, run_id) == 0
    with sessions.begin() as s:  # attempt 2 starts elsewhere, then attempt 1's worker finishes
        assert lifecycle.start(s, run_id=run_id, host="h2", gpu_indices="", started_at=utcnow())
        assert not lifecycle.finish(
            s, run_id=run_id, attempt=1, status=RunStatus.failed, exit_code=1, error="old"
        )
    run = row(sessions, run_id)
    assert (run.status, run.attempt, run.worker_host) == (RunStatus.running, 2, "h2")


def test_finish_refuses_a_status_that_is_not_final(sessions) -> None:
    run_id = running(sessions)
    with sessions.begin() as s, pytest.raises(ValueError, match="not a final status"):
        lifecycle.finish(
            s, run_id=run_id, attempt=1, status=RunStatus.queued, exit_code=None, error=None
        )


def test_a_lost_run_whose_cancel_was_requested_is_cancelled_not_requeued(sessions) -> None:
    """Requeued, it would stay queued for ever: the scheduler skips cancel-requested runs."""
    run_id = running(sessions, gpus=(0,), config={"max_restarts": 3})
    with sessions.begin() as s:
        assert lifecycle.cancel(s, run_id=run_id) is CancelOutcome.REQUESTED
    with sessions.begin() as s:
        run = s.get(Run, run_id)
        assert run is not None
        assert hand_over(s, run=run, reason="worker lost") is HandoverOutcome.CANCELLED
        # A second reaper with the same view of it: the guard sees it is not running.
        assert hand_over(s, run=run, reason="worker lost") is HandoverOutcome.GONE
    run = row(sessions, run_id)
    assert run.status is RunStatus.cancelled and lease_count(sessions, run_id) == 0


def test_a_lost_run_with_restarts_left_is_requeued_once(sessions) -> None:
    run_id = running(sessions, gpus=(0,), config={"max_restarts": 1})
    with sessions.begin() as s:
        run = s.get(Run, run_id)
        assert run is not None
        assert hand_over(s, run=run, reason="worker lost") is HandoverOutcome.REQUEUED
    with sessions.begin() as s:  # a reaper that read attempt 1 before the requeue
        stale = s.get(Run, run_id)
        assert stale is not None
        stale.attempt = 1
        stale.status = RunStatus.running
        s.expunge(stale)  # its view, never flushed
        assert hand_over(s, run=stale, reason="worker lost") is HandoverOutcome.GONE
    run = row(sessions, run_id)
    assert (run.status, run.attempt) == (RunStatus.queued, 2)
    assert lease_count(sessions, run_id) == 0


def test_a_slurm_job_is_recorded_on_its_running_attempt_and_a_requeue_clears_it(sessions) -> None:
    """hand_over: the attempt's outside job (worker.slurm) and its pending reason, only while
    the run runs as that attempt; the next attempt gets a job of its own."""
    run_id = running(sessions, config={"max_restarts": 1})
    with sessions.begin() as s:
        assert lifecycle.hand_over(
            s, run_id=run_id, attempt=1, external_id="41", reason="Slurm: Resources" * 40
        )
        assert not lifecycle.hand_over(s, run_id=run_id, attempt=2, external_id="42", reason=None)
    run = row(sessions, run_id)
    assert run.external_id == "41" and len(run.external_reason or "") == 255
    with sessions.begin() as s:  # Slurm started it: no reason any more
        assert lifecycle.hand_over(s, run_id=run_id, attempt=1, external_id="41", reason=None)
    assert row(sessions, run_id).external_reason is None
    with sessions.begin() as s:
        assert lifecycle.requeue(s, run_id=run_id, attempt=1, resume_from=None, reason="NODE_FAIL")
    run = row(sessions, run_id)
    assert (run.status, run.attempt, run.external_id) == (RunStatus.queued, 2, None)
    with sessions.begin() as s:  # not running: nothing to record
        assert not lifecycle.hand_over(s, run_id=run_id, attempt=2, external_id="42", reason=None)


def test_the_build_phase_is_written_only_while_the_attempt_runs_and_a_requeue_clears_it(
    sessions,
) -> None:
    run_id = running(sessions)
    with sessions.begin() as s:
        assert phase.building(s, run_id=run_id, attempt=1)
        assert phase.build_progress(s, run_id=run_id, attempt=1, line="Collecting x" * 100)
        assert not phase.build_progress(s, run_id=run_id, attempt=2, line="stale")
        assert not phase.training(s, run_id=run_id, attempt=2)
    run = row(sessions, run_id)
    assert run.env_build_started_at is not None and run.training_started_at is None
    assert run.env_build_line == ("Collecting x" * 100)[: phase.MAX_BUILD_LINE]
    with sessions.begin() as s:
        assert phase.training(s, run_id=run_id, attempt=1)
        assert lifecycle.requeue(s, run_id=run_id, attempt=1, resume_from=None, reason="lost")
    run = row(sessions, run_id)  # the next attempt builds (or reuses) and starts anew
    assert (run.env_build_started_at, run.env_build_line, run.training_started_at) == (None,) * 3
    with sessions.begin() as s:
        assert not phase.building(s, run_id=run_id, attempt=1)  # queued: nobody's now


def requeued_as_2(maker: sessionmaker[Session]) -> int:
    """A run on host "h" (GPU 0) that a reaper requeued while its worker restarted."""
    run_id = running(maker, gpus=(0,), config={"max_restarts": 1})
    with maker.begin() as s:
        s.get_one(Run, run_id).metrics_offset = 1234
        assert lifecycle.requeue(s, run_id=run_id, attempt=1, resume_from=None, reason="lost")
    return run_id


def test_a_worker_back_takes_its_requeued_run_back_while_no_other_attempt_started(
    sessions,
) -> None:
    """Issue 39: re-adoption beats the reaper. The spool is read again from its start (the
    requeue dropped the points past the checkpoint; those stored are kept, unique per step)."""
    run_id = requeued_as_2(sessions)
    with sessions.begin() as s:
        back = readopt(s, run_id=run_id, attempt=1, host="h", reclaim_gpus=(0,))
    assert back is not None and back.gpu_indices == (0,) and back.has_leases
    run = row(sessions, run_id)
    assert (run.status, run.attempt, run.gpu_indices, run.metrics_offset) == (
        RunStatus.running,
        1,
        "0",
        0,
    )
    assert run.heartbeat_at is not None and "attempt 2 withdrawn" in (run.error or "")
    assert lease_count(sessions, run_id) == 1
    with sessions.begin() as s:  # attempt 2's message comes: the run is not queued any more
        assert not lifecycle.start(s, run_id=run_id, host="h2", gpu_indices="", started_at=utcnow())


def test_a_requeued_run_is_not_taken_back_by_another_host_once_started_or_cancelled(
    sessions,
) -> None:
    other_host = requeued_as_2(sessions)
    started = requeued_as_2(sessions)
    cancelled = requeued_as_2(sessions)
    not_alive = requeued_as_2(sessions)
    with sessions.begin() as s:
        assert lifecycle.start(s, run_id=started, host="h2", gpu_indices="", started_at=utcnow())
        assert lifecycle.cancel(s, run_id=cancelled) is CancelOutcome.CANCELLED
    with sessions.begin() as s:
        assert readopt(s, run_id=other_host, attempt=1, host="h3", reclaim_gpus=(0,)) is None
        assert readopt(s, run_id=started, attempt=1, host="h", reclaim_gpus=(0,)) is None
        assert readopt(s, run_id=cancelled, attempt=1, host="h", reclaim_gpus=(0,)) is None
        assert readopt(s, run_id=not_alive, attempt=1, host="h") is None  # its job is gone
    assert row(sessions, other_host).status is RunStatus.queued
    assert (row(sessions, started).attempt, row(sessions, started).worker_host) == (2, "h2")
    assert row(sessions, not_alive).status is RunStatus.queued
