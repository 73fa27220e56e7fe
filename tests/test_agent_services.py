"""The app services the host agent (worker/) changes data through, on the suite's database
rolled back after each test (db_sessions): a worker's check-in (app.runs.state.lifecycle.check_in),
handing over and re-adopting an attempt (app.runs.state.recovery), a requeued run's spool
(app.runs.state.attempts), where a system series starts (app.metrics.system_series), an ingestion
error said on the run (app.runs.state.notices), and how app.db tells a database that is away from a
refused row."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.db import database_away, is_conflict
from app.gpus.models import GpuLease
from app.metrics.ingest import ingest_points
from app.metrics.system_series import series_start
from app.runs.models import Run
from app.runs.state import lifecycle
from app.runs.state.answers import CancelOutcome, Standing
from app.runs.state.attempts import restart_spool
from app.runs.state.notices import note_ingest_error
from app.runs.state.recovery import HandoverOutcome, Readopted, hand_over_attempt, readopt
from app.runs.state.status import RunStatus
from app.timeutil import utcnow
from tests.factories import admin_run

CPU = "sys/cpu_percent"
Sessions = sessionmaker[Session]


@pytest.fixture
def sessions(db_sessions: Sessions) -> Sessions:
    return db_sessions


def started(sessions: Sessions, gpus: str = "", host: str = "agent-host") -> int:
    """A run of attempt 1, running on `host` with `gpus` leased there."""
    with sessions.begin() as session:
        run_id = admin_run(session, status="queued")
        at = utcnow()
        assert lifecycle.start(session, run_id=run_id, host=host, gpu_indices=gpus, started_at=at)
        for index in (int(i) for i in gpus.split(",") if i):
            session.add(GpuLease(host=host, gpu_index=index, run_id=run_id, acquired_at=at))
    return run_id


def check_in(sessions: Sessions, run_id: int, attempt: int = 1, *, beat: bool = False) -> Standing:
    with sessions.begin() as session:
        return lifecycle.check_in(
            session, run_id=run_id, attempt=attempt, renew_leases=True, beat=beat
        )


def run_row(sessions: Sessions, run_id: int) -> Run:
    with sessions.begin() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


# --- check_in: the heartbeat's answer ------------------------------------------------------


def test_check_in_of_the_running_attempt_is_owned_and_beats_only_when_asked(
    db_sessions: Sessions,
) -> None:
    sessions = db_sessions
    run_id = started(sessions)
    with sessions.begin() as session:
        session.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=None))
    assert check_in(sessions, run_id) is Standing.OWNED
    assert run_row(sessions, run_id).heartbeat_at is None
    assert check_in(sessions, run_id, beat=True) is Standing.OWNED
    assert run_row(sessions, run_id).heartbeat_at is not None


def test_check_in_renews_the_runs_leases_with_the_beat(sessions: Sessions) -> None:
    run_id = started(sessions, gpus="6", host="agent-renew")
    old = utcnow() - timedelta(hours=1)
    with sessions.begin() as session:
        session.execute(update(GpuLease).where(GpuLease.run_id == run_id).values(heartbeat_at=old))
    assert check_in(sessions, run_id, beat=True) is Standing.OWNED
    with sessions.begin() as session:
        stamp = session.scalar(select(GpuLease.heartbeat_at).where(GpuLease.run_id == run_id))
    assert stamp is not None and stamp.replace(tzinfo=None) > old.replace(tzinfo=None)


def test_a_requested_cancel_is_the_answer_even_once_the_run_ended(sessions: Sessions) -> None:
    run_id = started(sessions)
    with sessions.begin() as session:
        assert lifecycle.cancel(session, run_id=run_id) is CancelOutcome.REQUESTED
    assert check_in(sessions, run_id, beat=True) is Standing.CANCEL_REQUESTED
    with sessions.begin() as session:
        assert lifecycle.finish(
            session,
            run_id=run_id,
            attempt=1,
            status=RunStatus.cancelled,
            exit_code=None,
            error=None,
        )
    assert check_in(sessions, run_id) is Standing.CANCEL_REQUESTED


def test_an_attempt_handed_over_is_not_owned_and_its_beat_stamps_nothing(
    db_sessions: Sessions,
) -> None:
    sessions = db_sessions
    run_id = started(sessions)
    with sessions.begin() as session:
        assert lifecycle.requeue(
            session, run_id=run_id, attempt=1, resume_from=None, reason="worker lost"
        )
    assert check_in(sessions, run_id, beat=True) is Standing.NOT_OWNED
    assert (
        run_row(sessions, run_id).heartbeat_at is None
    )  # the requeue cleared it; the beat took none
    assert check_in(sessions, run_id, attempt=2) is Standing.NOT_OWNED  # queued, not running yet


def test_a_deleted_run_answers_deleted(sessions: Sessions) -> None:
    run_id = started(sessions)
    with sessions.begin() as session:
        session.execute(delete(Run).where(Run.id == run_id))
    assert check_in(sessions, run_id, beat=True) is Standing.DELETED


# --- hand over and re-adopt an attempt -----------------------------------------------------


def test_hand_over_attempt_only_while_the_run_runs_as_that_attempt(sessions: Sessions) -> None:
    run_id = started(sessions)  # the factory's config: max_restarts 0
    with sessions.begin() as session:
        outcome = hand_over_attempt(session, run_id=run_id, attempt=2, reason="shut down")
    assert outcome is HandoverOutcome.GONE
    assert run_row(sessions, run_id).status is RunStatus.running
    with sessions.begin() as session:
        outcome = hand_over_attempt(session, run_id=run_id, attempt=1, reason="shut down")
    assert outcome is HandoverOutcome.FAILED
    assert run_row(sessions, run_id).error == "shut down"
    with sessions.begin() as session:
        assert hand_over_attempt(session, run_id=-1, attempt=1, reason="x") is HandoverOutcome.GONE


def test_readopt_takes_back_an_expired_lease_and_heartbeats(sessions: Sessions) -> None:
    run_id = started(sessions, gpus="3,4", host="agent-readopt")
    with sessions.begin() as session:  # one lease expired while no worker renewed it
        session.execute(delete(GpuLease).where(GpuLease.run_id == run_id, GpuLease.gpu_index == 4))
        session.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=None))
    with sessions.begin() as session:
        found = readopt(session, run_id=run_id, attempt=1, host="agent-readopt")
    assert found == Readopted(has_leases=True, in_sweep=False, gpu_indices=(3, 4))
    with sessions.begin() as session:
        held = session.scalars(select(GpuLease.gpu_index).where(GpuLease.run_id == run_id))
        assert sorted(held) == [3, 4]
    assert run_row(sessions, run_id).heartbeat_at is not None
    with sessions.begin() as session:
        assert readopt(session, run_id=run_id, attempt=2, host="agent-readopt") is None
    digest = "sha256:" + "ab" * 32  # a snapshot's run: the worker holds its shared copy again
    with sessions.begin() as session:
        config = {"script": "train.py", "code": digest, "seed": 1}
        session.execute(update(Run).where(Run.id == run_id).values(config=config))
    with sessions.begin() as session:
        found = readopt(session, run_id=run_id, attempt=1, host="agent-readopt")
    assert found is not None and found.code == digest


def test_readopt_is_refused_whole_when_another_run_took_its_gpu(sessions: Sessions) -> None:
    run_id = started(sessions, gpus="5", host="agent-taken")
    with sessions.begin() as session:
        session.execute(delete(GpuLease).where(GpuLease.run_id == run_id))
    other = started(sessions, gpus="5", host="agent-taken")
    with pytest.raises(IntegrityError) as refused, sessions.begin() as session:
        readopt(session, run_id=run_id, attempt=1, host="agent-taken")
    assert is_conflict(refused.value) and not database_away(refused.value)
    with sessions.begin() as session:
        owners = session.scalars(select(GpuLease.run_id).where(GpuLease.host == "agent-taken"))
        assert list(owners) == [other]


def test_database_away_is_an_unreachable_database_not_a_refused_row(sessions: Sessions) -> None:
    away = OperationalError("SELECT 1", {}, Exception("connection refused"))
    assert database_away(away) and not is_conflict(away)
    assert not database_away(ValueError("a bug"))


# --- a requeued run's spool, its system series, its notes ----------------------------------


def test_restart_spool_starts_reading_afresh_and_says_where_the_log_goes_on(
    db_sessions: Sessions,
) -> None:
    sessions = db_sessions
    run_id = started(sessions)
    with sessions.begin() as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(metrics_offset=900, log_offset=123, attempt=3, tb_offsets={"a": 1})
        )
    with sessions.begin() as session:
        got = restart_spool(session, run_id=run_id, tb_offsets={"tb/events.out": 77})
    assert got is not None and (got.attempt, got.log_offset) == (3, 123)
    run = run_row(sessions, run_id)
    assert (run.metrics_offset, run.tb_offsets) == (0, {"tb/events.out": 77})
    with sessions.begin() as session:
        assert restart_spool(session, run_id=-1, tb_offsets={}) is None


def test_series_start_is_the_start_moved_back_past_earlier_attempts_series(
    db_sessions: Sessions,
) -> None:
    sessions = db_sessions
    with sessions.begin() as session:
        run_id = admin_run(session, status="running")
        assert series_start(session, run_id=run_id, keys=[CPU]) is None  # never started
    at = utcnow() - timedelta(seconds=30)
    with sessions.begin() as session:
        session.execute(
            update(Run).where(Run.id == run_id).values(started_at=at, gpu_indices="1,3")
        )
    with sessions.begin() as session:
        first = series_start(session, run_id=run_id, keys=[CPU])
    assert first is not None and first.gpu_indices == (1, 3)
    assert first.at == pytest.approx(at.timestamp())
    t0 = at.timestamp() - 100
    with sessions.begin() as session:  # an earlier attempt's seconds 0..9, before this start
        ingest_points(session, run_id=run_id, points=[(CPU, s, 1.0, t0 + s) for s in range(10)])
    with sessions.begin() as session:
        later = series_start(session, run_id=run_id, keys=[CPU])
        assert later is not None and later.at == pytest.approx(at.timestamp() - 10)
        assert series_start(session, run_id=run_id, keys=["sys/other"]) == first


def test_the_first_ingestion_error_is_the_one_kept_on_the_run(sessions: Sessions) -> None:
    with sessions.begin() as session:
        run_id = admin_run(session)
        note_ingest_error(session, run_id=run_id, error="forward: ValueError: first")
        note_ingest_error(session, run_id=-1, error="a run that is gone is no error")
    with sessions.begin() as session:
        note_ingest_error(session, run_id=run_id, error="forward: ValueError: second")
    assert (run_row(sessions, run_id).notices or {})["error"] == "forward: ValueError: first"
