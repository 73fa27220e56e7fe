"""Fencing by attempt (issue 27): the server's word on which attempt owns a run is final.

A stale attempt's batch is refused by the server (app.runs.state.lifecycle.holds, asked by the
forwarder); a job of this worker keeps its GPUs busy on its host until it is gone
(worker.held_gpus), whatever the leases say. Units of work on db_sessions (rolled back).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from app.gpus.service import StartOutcome, try_start
from app.metrics.service import count_points
from app.runs.models import Run
from app.runs.state import lifecycle
from app.runs.state.recovery import requeue
from tests.factories import admin_run
from worker import held_gpus
from worker.forwarder import forward

GPU_RUN = {"recipe": "tiny_mlp", "params": {}, "seed": 1, "resources": {"gpus": 1}}


def line(step: int) -> str:
    values = {"train/loss": 1.0 / step}
    return json.dumps({"type": "metrics", "step": step, "time": 1000.0 + step, "values": values})


def pump(sessions: sessionmaker[Session], run_id: int, path: Path, attempt: int) -> int:
    with sessions.begin() as session:
        return forward(session, run_id=run_id, metrics_path=path, attempt=attempt)


def points(sessions: sessionmaker[Session], run_id: int) -> int:
    with sessions.begin() as session:
        return count_points(session, run_id=run_id)


def test_a_stale_attempts_late_batch_is_refused(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    """Attempt 1 stalled and was requeued: its late batch lands in no curve, before the next
    attempt starts and after, while attempt 2's own batches are stored."""
    with db_sessions.begin() as session:
        run_id = admin_run(session)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(line(s) + "\n" for s in (1, 2)))
    assert pump(db_sessions, run_id, path, attempt=1) == 2
    assert points(db_sessions, run_id) == 2

    with db_sessions.begin() as session:  # the reaper's requeue (no checkpoint: from step 0)
        assert requeue(session, run=session.get_one(Run, run_id), reason="worker lost")
    with path.open("a") as f:
        f.write("".join(line(s) + "\n" for s in (3, 4)))
    assert pump(db_sessions, run_id, path, attempt=1) == 0  # queued as attempt 2
    assert points(db_sessions, run_id) == 0

    with db_sessions.begin() as session:
        assert lifecycle.start(
            session, run_id=run_id, host="h", gpu_indices="", started_at=datetime.now(UTC)
        )
        assert not lifecycle.holds(session, run_id=run_id, attempt=1)
        assert lifecycle.holds(session, run_id=run_id, attempt=2)
    assert pump(db_sessions, run_id, path, attempt=1) == 0  # running as attempt 2
    assert points(db_sessions, run_id) == 0
    # (The next attempt's worker starts its spool anew: worker.spool.start_attempt.)
    assert pump(db_sessions, run_id, path, attempt=2) == 2
    assert points(db_sessions, run_id) == 2


def start_on(sessions: sessionmaker[Session], run_id: int, host: str) -> StartOutcome:
    with sessions.begin() as session:
        return try_start(
            session,
            run_id=run_id,
            host=host,
            inventory=[0],
            lease_ttl_seconds=30,
            starvation_seconds=600,
            gpu_stats=held_gpus.mark_busy(None, (0,)),
        ).outcome


def test_a_gpu_a_job_of_this_worker_runs_on_is_not_handed_out_until_it_is_gone(
    db_sessions: sessionmaker[Session],
) -> None:
    """The reaper released the leases of a stalled attempt whose job still runs here: the
    host's worker shows its GPU busy until the job is gone, so no other run starts on it."""
    with db_sessions.begin() as session:
        run_id = admin_run(session, config=GPU_RUN, status="queued")
    host = "fence-host"
    with held_gpus.holding(run_id + 1000, 1, (0,), pid=4242):
        assert held_gpus.mark_busy(None, (0, 1)) == [{"index": 0, "pids": [4242]}]
        assert held_gpus.mark_busy(None, (1,)) is None  # not this inventory's GPU
        assert start_on(db_sessions, run_id, host) is StartOutcome.WAIT
    assert held_gpus.held() == {}
    assert start_on(db_sessions, run_id, host) is StartOutcome.STARTED
