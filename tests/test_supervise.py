"""worker.supervise with a real job and the suite's database."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.db import session_scope
from app.runs.models import Run
from tests.connection_cut import cut_once
from tests.test_heartbeat import job_waiting_for, started_run
from worker.supervise import remember


@pytest.mark.postgres_only
def test_a_connection_cut_while_the_pid_is_recorded_is_tried_again(tmp_path: Path) -> None:
    """The pid is written inside the job's block, where anything that raises stops the job.
    A connection PostgreSQL ended under it (a worker frozen past db_idle_transaction_seconds,
    a failover, pg_terminate_backend) stopped a healthy job there, and one that had exited 0
    during a freeze left its run "failed: worker lost" for good (tests/test_fencing_e2e.py:
    1 of 3 tries of the module failed so). The write is tried again in a new session."""
    run = started_run(tmp_path)
    with cut_once(lambda statement: statement.startswith("UPDATE runs SET pid")):
        with job_waiting_for(tmp_path, tmp_path / "done") as job:
            remember(job, run, host="supervise-test")
            (tmp_path / "done").touch()
    with session_scope() as session:
        row = session.get(Run, run.run_id)
        assert row is not None and row.pid == job.pid
