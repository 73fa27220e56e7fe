"""One owner per table (or column group), written down in docs/architecture.md and checked by
what is written, not by how the code names it (issue 38): tests/table_owners.py watches every
write of the suite; here it is shown refusing the breaks a reviewer tried and letting the
owners' own writes through.

A break has to look like code of the product to be checked, since the guard attributes a
write to the nearest frame under app/ or worker/. Each break below is compiled with a file
name under app/ or worker/ (the module a real change would add) and run in this process: the
frame SQLAlchemy's events see is that file's, exactly as for a module on disk.
"""

from __future__ import annotations

import re
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.experiments.models import Experiment
from app.orm_base import Base
from app.runs import service as runs_service
from app.runs.models import Run
from tests.factories import add_owned_run
from tests.table_owners import (
    DELETED_ROWS,
    NEW_ROWS,
    REPO,
    REST,
    OwnershipError,
    active_guard,
    load_owners,
    parse_owners,
    written_by,
)


def module_at(relative: str, source: str) -> types.ModuleType:
    """``source`` as the module at ``relative`` (e.g. worker/break.py) would be: compiled with
    that file name and named after it."""
    name = relative.removesuffix(".py").replace("/", ".")
    module = types.ModuleType(name)
    module.__file__ = str(REPO / relative)
    exec(compile(textwrap.dedent(source), module.__file__, "exec"), module.__dict__)
    return module


@contextmanager
def refused(match: str) -> Iterator[None]:
    """The write is refused where it is made, naming module, table and owner; the guard's
    record of it is taken, so the test that showed it does not fail for it afterwards."""
    with pytest.raises(OwnershipError, match=re.escape(match)):
        yield
    assert any(match in found for found in active_guard().take())


def test_raw_sql_updating_runs_from_the_worker_is_refused(db: Session) -> None:
    run_id = add_owned_run(db)
    worker = module_at(
        "worker/ownership_break.py",
        """
        def finish(session, run_id):
            session.connection().exec_driver_sql(
                "UPDATE runs SET status = 'succeeded' WHERE id = ?", (run_id,)
            )
        """,
    )
    with refused("worker/ownership_break.py writes runs.status (owner: an app service)"):
        worker.finish(db, run_id)
    assert db.get(Run, run_id, populate_existing=True).status.value == "queued"  # type: ignore[union-attr]


def test_raw_sql_in_app_is_checked_by_the_table_it_writes(db: Session) -> None:
    run_id = add_owned_run(db)
    sweeps = module_at(
        "app/sweeps/ownership_break.py",
        """
        from sqlalchemy import text

        def rename(session, run_id):
            session.execute(text("update runs set name = 'x' where id = :i"), {"i": run_id})
        """,
    )
    with refused("app/sweeps/ownership_break.py writes runs.name (owner: app/runs/service.py)"):
        sweeps.rename(db, run_id)


def test_a_model_re_exported_from_a_service_and_mutated_is_refused(db: Session) -> None:
    """`Run` imported from app.mlflow.writes (which imports it): the class, not the name, is
    what the guard knows."""
    run_id = add_owned_run(db)
    mlflow = module_at(
        "app/mlflow/ownership_break.py",
        """
        from app.mlflow.writes import Run as Entry

        def rename(session, run_id):
            session.get(Entry, run_id).name = "renamed behind the owner's back"
        """,
    )
    with refused("app/mlflow/ownership_break.py writes runs.name (owner: app/runs/service.py)"):
        mlflow.rename(db, run_id)


def test_deleting_an_experiment_outside_its_owner_is_refused(db: Session) -> None:
    run_id = add_owned_run(db)
    experiment_id = db.get(Run, run_id).experiment_id  # type: ignore[union-attr]
    runs = module_at(
        "app/runs/ownership_break.py",
        """
        from app.experiments.models import Experiment

        def drop(session, experiment_id):
            session.delete(session.get(Experiment, experiment_id))
        """,
    )
    with refused(
        "app/runs/ownership_break.py writes deleted rows of experiments"
        " (owner: app/experiments/service.py)"
    ):
        runs.drop(db, experiment_id)
    assert db.get(Experiment, experiment_id) is not None


def test_adding_a_row_outside_its_owner_is_refused(db: Session) -> None:
    run_id = add_owned_run(db)
    owner_id = db.get(Run, run_id).owner_id  # type: ignore[union-attr]
    mlflow = module_at(
        "app/mlflow/ownership_break.py",
        """
        from app.experiments.models import Experiment

        def create(session, owner_id):
            session.add(Experiment(name="e", description="", config={}, owner_id=owner_id))
        """,
    )
    with refused("writes new rows of experiments (owner: app/experiments/service.py)"):
        mlflow.create(db, owner_id)


def test_the_owners_writes_and_the_tests_own_rows_pass(db: Session) -> None:
    """The owner's service writes; the factories (test code) add rows of any table."""
    run_id = add_owned_run(db)
    run = db.get(Run, run_id)
    assert run is not None
    runs_service.set_name(db, run=run, name="by its owner")
    db.flush()
    assert db.scalar(select(Run.name).where(Run.id == run_id)) == "by its owner"
    assert active_guard().take() == []


# --- the table of owners ------------------------------------------------------------------


def test_every_table_and_column_group_has_one_owning_module_in_app() -> None:
    owners = load_owners()
    tables = Base.metadata.tables
    assert sorted(owners.tables) == sorted(tables), "docs/architecture.md: a table without owner"
    for name, groups in owners.tables.items():
        assert REST in groups, f"{name}: no owner for 'the rest'"
        columns = set(tables[name].columns.keys())
        for key, owner in groups.items():
            assert key in (NEW_ROWS, DELETED_ROWS, REST) or key in columns, f"{name}.{key}?"
            assert owner.startswith("app/") and owner.count("/") >= 2, owner
            assert (REPO / owner).is_file(), owner


def test_a_column_with_two_owners_is_an_error() -> None:
    doc = textwrap.dedent(
        """
        ## Who writes each table

        | table | columns | owner |
        | --- | --- | --- |
        | `runs` | the rest | `app/runs/state/lifecycle.py` |
        | `runs` | `name` | `app/runs/service.py` |
        | `runs` | `name` | `app/sweeps/service.py` |
        """
    )
    with pytest.raises(ValueError, match="runs.name has two owners"):
        parse_owners(doc)


@pytest.mark.parametrize(
    ("sql", "written"),
    [
        (
            "UPDATE runs SET status=?, finished_at=? WHERE runs.id = ?",
            ("runs", ["status", "finished_at"]),
        ),
        (
            'update "runs" set name = (select n from t where a = 1), notes = ? where id = 1',
            ("runs", ["name", "notes"]),
        ),
        (
            "INSERT INTO metrics (key_id, step) VALUES (?, ?) ON CONFLICT DO NOTHING",
            ("metrics", [NEW_ROWS]),
        ),
        ("insert or ignore into metrics values (1)", ("metrics", [NEW_ROWS])),
        ("REPLACE INTO ops_counters VALUES (1)", ("ops_counters", [NEW_ROWS])),
        ("DELETE FROM experiments WHERE id = 1", ("experiments", [DELETED_ROWS])),
        (
            "/* c */ WITH x AS (SELECT 1) UPDATE metric_keys SET last_value = x.v FROM x",
            ("metric_keys", ["last_value"]),
        ),
        ("UPDATE OR IGNORE main.runs SET pid = 1", ("runs", ["pid"])),
        ("SELECT * FROM runs FOR UPDATE", None),
        ("WITH d AS (DELETE FROM runs RETURNING id) SELECT * FROM d", ("runs", [DELETED_ROWS])),
    ],
)
def test_the_written_table_is_read_from_the_sql(sql: str, written: Any) -> None:
    assert written_by(sql) == written
