"""Migration 0023 (experiments.best_metric / best_mode: the experiment's own "best" metric),
the pattern of tests/test_migrations.py: rows of before survive, the new columns start empty,
and the downgrade drops them keeping the rows; on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy import inspect

from app import migrate
from tests.databases import KINDS, own_database
from tests.test_migrations import V1_ROWS, V1_TABLES


@pytest.mark.parametrize("kind", KINDS)
def test_experiment_best_metric_upgrades_empty_and_downgrades_without_it(kind, tmp_path) -> None:
    """0023 (experiments.best_metric/best_mode): rows from before have no choice (NULL), a
    choice is stored, and the downgrade drops both columns keeping the experiment."""
    with own_database(kind, tmp_path, "ty_mig23", revision="0022") as engine:
        url = engine.url.render_as_string(hide_password=False)
        with engine.begin() as conn:
            user = {k: v for k, v in V1_ROWS["users"][1].items() if k != "is_admin"}
            users = sa.table("users", *(sa.column(k) for k in user))
            conn.execute(sa.insert(users), [user])  # 0006 made is_admin a role (default member)
            conn.execute(sa.insert(V1_TABLES["experiments"]), V1_ROWS["experiments"])
        migrate.upgrade(url, "0023")
        engine.dispose()
        columns = {c["name"] for c in inspect(engine).get_columns("experiments")}
        assert {"best_metric", "best_mode"} <= columns
        with engine.begin() as conn:
            row = conn.execute(sa.text("SELECT best_metric, best_mode FROM experiments"))
            assert [tuple(r) for r in row] == [(None, None)]
            conn.execute(
                sa.text("UPDATE experiments SET best_metric = 'val/loss', best_mode = 'min'")
            )

        migrate.downgrade(url, "0022")
        engine.dispose()
        columns = {c["name"] for c in inspect(engine).get_columns("experiments")}
        assert not {"best_metric", "best_mode"} & columns
        with engine.connect() as conn:
            names = conn.execute(sa.text("SELECT id, name FROM experiments"))
            assert [tuple(r) for r in names] == [(1, "digits")]
        migrate.upgrade(url, "0023")
        engine.dispose()
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT best_metric, best_mode FROM experiments"))
            assert [tuple(r) for r in row] == [(None, None)]
