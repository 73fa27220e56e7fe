"""The runner: no job outlives a failed start, and a run no longer queued is not run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app import db, settings
from app.auth.models import User
from app.experiments.models import Experiment
from app.gpus.models import GpuLease
from app.runs.models import Run, RunStatus
from app.runs.state.answers import CancelOutcome
from app.runs.state.lifecycle import cancel, queue
from tests.conftest import processes_in
from tests.databases import KINDS, own_database
from torchyard.contract import LOG_FILE
from worker import runner
from worker.executor import NotRun

# --- a failure after the spawn ----------------------------------------------------------------

# A real fault, not a mock: the database refuses the pid write (think of a full disk), after
# the job's processes exist and its GPU is leased.
REFUSE_PID = {
    "sqlite": [
        "CREATE TRIGGER refuse_pid BEFORE UPDATE OF pid ON runs WHEN NEW.pid IS NOT NULL"
        " BEGIN SELECT RAISE(ABORT, 'pid write refused'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_pid() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'pid write refused'; END $$",
        "CREATE TRIGGER refuse_pid BEFORE UPDATE OF pid ON runs FOR EACH ROW"
        " WHEN (NEW.pid IS NOT NULL) EXECUTE FUNCTION refuse_pid()",
    ],
}


@pytest.fixture(params=KINDS)
def worker_on_own_database(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Engine, Path]]:
    """This process as a worker with one (fake) GPU, on a database and data dir of its own."""
    data_dir = tmp_path / "data"
    with own_database(request.param, tmp_path, "ty_runner") as engine:
        monkeypatch.setenv("TORCHYARD_DATABASE_URL", engine.url.render_as_string(False))
        monkeypatch.setenv("TORCHYARD_DATA_DIR", str(data_dir))
        monkeypatch.setenv("TORCHYARD_FAKE_GPUS", "0")
        monkeypatch.setenv("TORCHYARD_WORKER_HOST", f"runner-{request.param}")
        db.get_engine().dispose()  # the suite's engine: no pooled connection may leak
        caches = (settings.get_settings, db.get_engine, db.get_sessionmaker, runner.inventory)
        for cached in caches:
            cached.cache_clear()
        try:
            with engine.begin() as conn:
                for statement in REFUSE_PID[request.param]:
                    conn.exec_driver_sql(statement)
            yield engine, data_dir
        finally:
            db.get_engine().dispose()
            monkeypatch.undo()
            for cached in caches:
                cached.cache_clear()


def queued_run(engine: Engine, config: dict) -> int:
    with Session(engine) as session:
        user = User(username=f"runner-{os.urandom(4).hex()}", password_hash="-")
        session.add(user)
        session.flush()
        exp = Experiment(name="pid", config={}, owner_id=user.id)
        session.add(exp)
        session.flush()
        run_id = queue(session, experiment_id=exp.id, owner_id=user.id, config=config).id
        session.info.pop("after_commit")  # the test is the worker: nothing goes to a broker
        session.commit()
    return run_id


def test_a_failed_pid_write_stops_the_job_and_frees_its_gpu(worker_on_own_database) -> None:
    engine, data_dir = worker_on_own_database
    config = {"recipe": "tiny_mlp", "params": {"epochs": 50}, "seed": 1}
    run_id = queued_run(engine, {**config, "resources": {"gpus": 1, "nproc": 1}})

    outcome = runner.execute_run(run_id)

    assert outcome is RunStatus.failed
    assert processes_in(data_dir / "runs" / str(run_id)) == []
    with Session(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None and run.status is RunStatus.failed
        assert run.error is not None and "pid write refused" in run.error
        assert session.scalars(select(GpuLease)).all() == []
    # The job had been started: the failure came after the spawn.
    assert (data_dir / "runs" / str(run_id) / LOG_FILE).exists()


def test_a_run_cancelled_while_queued_is_not_run(worker_on_own_database) -> None:
    engine, data_dir = worker_on_own_database
    run_id = queued_run(engine, {"recipe": "tiny_mlp", "params": {}, "seed": 1})
    with Session(engine) as session:
        assert cancel(session, run_id=run_id) is CancelOutcome.CANCELLED
        session.commit()
    assert runner.execute_run(run_id) is NotRun.GONE
    assert not (data_dir / "runs" / str(run_id)).exists()
