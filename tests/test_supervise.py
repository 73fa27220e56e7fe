"""worker.supervise with a real job and the suite's database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from app.db import get_engine, make_engine, session_scope
from app.runs.models import Run
from tests.test_heartbeat import job_waiting_for, started_run
from worker.supervise import remember


@pytest.mark.postgres_only
def test_a_connection_cut_while_the_pid_is_recorded_is_tried_again(tmp_path: Path) -> None:
    """The pid is written inside the job's block, where anything that raises stops the job.
    A connection PostgreSQL ended under it (a worker frozen past db_idle_transaction_seconds,
    a failover, pg_terminate_backend) stopped a healthy job there, and one that had exited 0
    during a freeze left its run "failed: worker lost" for good (tests/test_fencing_e2e.py:
    1 of 3 tries of the module failed so). The write is tried again in a new session."""
    engine = get_engine()
    assert engine.dialect.name == "postgresql", "the services pass runs this test"
    killer = make_engine(engine.url.render_as_string(hide_password=False), pooled=False)
    cut: list[int] = []

    def cut_once(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("UPDATE runs SET pid") and not cut:
            cut.append(cursor.connection.info.backend_pid)
            with killer.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": cut[0]})

    run = started_run(tmp_path)
    event.listen(engine, "before_cursor_execute", cut_once)
    try:
        with job_waiting_for(tmp_path, tmp_path / "done") as job:
            remember(job, run, host="supervise-test")
            (tmp_path / "done").touch()
    finally:
        event.remove(engine, "before_cursor_execute", cut_once)
        killer.dispose()
    assert cut, "the pid's write never ran"
    with session_scope() as session:
        row = session.get(Run, run.run_id)
        assert row is not None and row.pid == job.pid
