"""The schema comes only from Alembic, and every migration has a working downgrade."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import inspect
from sqlalchemy.orm import Session

from app import migrate
from app.auth.models import User
from app.db import make_engine
from app.metrics.overview.stored import read_overviews
from app.orm_base import Base
from app.runs.models import Run
from tests.databases import KINDS, own_database


def test_upgrade_downgrade_upgrade_on_a_fresh_sqlite_database(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    migrate.downgrade(url, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    migrate.upgrade(url)
    assert migrate.current_revision(engine) == migrate.head_revision(url)
    engine.dispose()


def test_sqlite_databases_use_wal(tmp_path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'w.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


def test_server_refuses_to_start_on_a_stale_schema(tmp_path, monkeypatch) -> None:
    import pytest
    from fastapi.testclient import TestClient

    from app import db, settings
    from app.main import SchemaNotCurrent, create_app

    monkeypatch.setenv("TORCHYARD_DATABASE_URL", f"sqlite:///{tmp_path / 'stale.db'}")
    db.get_engine().dispose()  # the suite's engine: its pooled connections must not leak
    for cached in (settings.get_settings, db.get_engine, db.get_sessionmaker):
        cached.cache_clear()
    try:
        with pytest.raises(SchemaNotCurrent, match="torchyard db upgrade"):
            with TestClient(create_app()):
                pass
    finally:
        db.get_engine().dispose()
        monkeypatch.undo()
        for cached in (settings.get_settings, db.get_engine, db.get_sessionmaker):
            cached.cache_clear()


def test_openapi_docs_are_served(client) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/runs/{run_id}/events" in paths and "/api/auth/token" in paths


# --- data survives the migrations ------------------------------------------------------------

T0 = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
# The 0001 schema, written out here (not the ORM models: later columns do not exist yet).
M = sa.MetaData()
V1_TABLES = {
    "users": sa.Table(
        "users",
        M,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("username", sa.String(64)),
        sa.Column("password_hash", sa.String(255)),
        sa.Column("is_admin", sa.Boolean),
        sa.Column("is_active", sa.Boolean),
        sa.Column("created_at", sa.DateTime(timezone=True)),
    ),
    "api_tokens": sa.Table(
        "api_tokens",
        M,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.Integer),
        sa.Column("token_hash", sa.String(64)),
        sa.Column("name", sa.String(100)),
        sa.Column("created_at", sa.DateTime(timezone=True)),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    ),
    "experiments": sa.Table(
        "experiments",
        M,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200)),
        sa.Column("description", sa.Text),
        sa.Column("config", sa.JSON),
        sa.Column("owner_id", sa.Integer),
        sa.Column("created_at", sa.DateTime(timezone=True)),
    ),
    "runs": sa.Table(
        "runs",
        M,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.Integer),
        sa.Column("owner_id", sa.Integer),
        sa.Column("status", sa.String(16)),
        sa.Column("config", sa.JSON),
        sa.Column("seed", sa.BigInteger),
        sa.Column("created_at", sa.DateTime(timezone=True)),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("exit_code", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("worker_host", sa.String(255)),
        sa.Column("pid", sa.Integer),
        sa.Column("cancel_requested", sa.Boolean),
        sa.Column("resume_from", sa.String(500)),
        sa.Column("metrics_offset", sa.BigInteger),
    ),
    "checkpoints": sa.Table(
        "checkpoints",
        M,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer),
        sa.Column("name", sa.String(255)),
        sa.Column("epoch", sa.Integer),
        sa.Column("step", sa.BigInteger),
        sa.Column("size_bytes", sa.BigInteger),
        sa.Column("path", sa.String(500)),
        sa.Column("created_at", sa.DateTime(timezone=True)),
    ),
    "metric_keys": sa.Table(
        "metric_keys",
        M,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer),
        sa.Column("key", sa.String(255)),
    ),
    "metrics": sa.Table(
        "metrics",
        M,
        sa.Column("key_id", sa.Integer, primary_key=True),
        sa.Column("step", sa.BigInteger, primary_key=True),
        sa.Column("value", sa.Double),
        sa.Column("wall_time", sa.Double),
    ),
}
RUN_CONFIG = {
    "recipe": "digits_cnn",
    "params": {"epochs": 3, "lr": 0.001, "layers": [32, 64]},
    "seed": 1029,
    "deterministic": True,
    "resources": {"nproc": 1},
}
V1_ROWS: dict[str, list[dict[str, Any]]] = {
    "users": [
        dict(
            id=1,
            username="admin",
            password_hash="$argon2id$v=19$x",
            is_admin=True,
            is_active=True,
            created_at=T0,
        ),
        dict(
            id=2,
            username="ada",
            password_hash="$argon2id$v=19$y",
            is_admin=False,
            is_active=False,
            created_at=T0 + timedelta(minutes=1),
        ),
    ],
    "api_tokens": [
        dict(
            id=1,
            user_id=2,
            token_hash="f" * 64,
            name="laptop",
            created_at=T0,
            expires_at=T0 + timedelta(days=7),
            revoked_at=None,
        ),
    ],
    "experiments": [
        dict(
            id=1,
            name="digits",
            description="a small CNN",
            config=RUN_CONFIG,
            owner_id=2,
            created_at=T0,
        ),
    ],
    "runs": [
        dict(
            id=1,
            experiment_id=1,
            owner_id=2,
            status="succeeded",
            config=RUN_CONFIG,
            seed=2**40 + 7,
            created_at=T0,
            started_at=T0 + timedelta(seconds=3),
            finished_at=T0 + timedelta(minutes=5),
            exit_code=0,
            error=None,
            worker_host="gpu-box-1",
            pid=4242,
            cancel_requested=False,
            resume_from=None,
            metrics_offset=123456,
        ),
        dict(
            id=2,
            experiment_id=1,
            owner_id=2,
            status="failed",
            config={**RUN_CONFIG, "params": {"epochs": 1}},
            seed=1,
            created_at=T0,
            started_at=None,
            finished_at=None,
            exit_code=1,
            error="Traceback: boom",
            worker_host=None,
            pid=None,
            cancel_requested=True,
            resume_from="1/final.pt",
            metrics_offset=0,
        ),
    ],
    "checkpoints": [
        dict(
            id=1,
            run_id=1,
            name="final.pt",
            epoch=3,
            step=2**33,
            size_bytes=987654,
            path="runs/1/checkpoints/final.pt",
            created_at=T0 + timedelta(minutes=5),
        ),
    ],
    "metric_keys": [
        dict(id=1, run_id=1, key="train/loss"),
        dict(id=2, run_id=1, key="val/acc"),
        dict(id=3, run_id=2, key="train/loss"),
    ],
    "metrics": [
        dict(key_id=1, step=0, value=2.302585, wall_time=1763630000.25),
        dict(key_id=1, step=1, value=None, wall_time=1763630000.5),
        dict(key_id=1, step=2**33, value=0.0123, wall_time=1763630001.0),
        dict(key_id=2, step=0, value=0.975, wall_time=1763630002.0),
        dict(key_id=3, step=0, value=9.5, wall_time=1763630003.0),
    ],
}


def _rows(engine: sa.Engine, *, upgraded: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Every 0001 table's rows, in the 0001 columns only (those still there once `upgraded`:
    users.is_admin became users.role), in primary-key order."""
    with engine.connect() as conn:
        rows = {}
        for name, table in V1_TABLES.items():
            columns = [c for c in table.columns if not (upgraded and c.name == "is_admin")]
            stmt = sa.select(*columns).order_by(*table.primary_key.columns)
            rows[name] = [dict(row._mapping) for row in conn.execute(stmt)]
        return rows


def _without_is_admin(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {
        name: [{k: v for k, v in row.items() if k != "is_admin"} for row in table_rows]
        for name, table_rows in rows.items()
    }


def _normalized(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """SQLite hands back naive datetimes: compare everything as UTC."""

    def fix(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value

    return {
        name: [{k: fix(v) for k, v in row.items()} for row in table_rows]
        for name, table_rows in rows.items()
    }


@pytest.mark.parametrize("kind", KINDS)
def test_rows_of_a_first_migration_database_survive_upgrade_to_head(kind, tmp_path) -> None:
    with own_database(kind, tmp_path, "ty_migdata", revision="0001") as engine:
        url = engine.url.render_as_string(hide_password=False)
        assert migrate.current_revision(engine) == "0001"
        with engine.begin() as conn:
            for name, rows in V1_ROWS.items():
                conn.execute(sa.insert(V1_TABLES[name]), rows)
            if engine.dialect.name == "postgresql":  # explicit ids: move the sequences past them
                for name in ("users", "api_tokens", "experiments", "runs", "checkpoints"):
                    conn.exec_driver_sql(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                        f"(SELECT max(id) FROM {name}))"
                    )
                conn.exec_driver_sql(
                    "SELECT setval(pg_get_serial_sequence('metric_keys', 'id'), 3)"
                )
        assert _normalized(_rows(engine)) == V1_ROWS

        migrate.upgrade(url)
        engine.dispose()
        assert migrate.current_revision(engine) == migrate.head_revision(url)
        # is_admin became role (0006): the admin is role admin, everybody else member
        after = _normalized(_rows(engine, upgraded=True))
        assert after == _without_is_admin(V1_ROWS), "rows changed by the migrations"
        with engine.connect() as conn:
            roles = conn.execute(sa.text("SELECT id, role FROM users ORDER BY id"))
            assert [tuple(r) for r in roles] == [(1, "admin"), (2, "member")]
            new = conn.execute(sa.text("SELECT id, priority, gpu_indices FROM runs ORDER BY id"))
            assert [tuple(r) for r in new] == [(1, 0, None), (2, 0, None)]
            for table in ("gpu_leases", "worker_hosts", "run_images"):
                assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() == 0
            # 0007: each run's config flattened into run_params, sortable by number or text
            params = conn.execute(
                sa.text(
                    "SELECT key, source, value_num, value_text FROM run_params"
                    " WHERE run_id = 1 ORDER BY key"
                )
            )
            assert [tuple(r) for r in params] == [
                ("deterministic", "config", 1.0, None),
                ("params.epochs", "config", 3.0, None),
                ("params.layers", "config", None, None),
                ("params.lr", "config", 0.001, None),
                ("recipe", "config", None, "digits_cnn"),
                ("resources.nproc", "config", 1.0, None),
                ("seed", "config", 1029.0, None),
            ]
            # 0009: each series' summary backfilled from its points (NULL points skipped)
            summaries = conn.execute(
                sa.text(
                    "SELECT id, last_value, min_value, max_value, last_step FROM metric_keys"
                    " ORDER BY id"
                )
            )
            assert [tuple(r) for r in summaries] == [
                (1, 0.0123, 0.0123, 2.302585, 2**33),
                (2, 0.975, 0.975, 0.975, 0),
                (3, 9.5, 9.5, 9.5, 0),
            ]
        # 0024: each series' overview backfilled from its points (width 1: every point)
        with Session(engine) as session:
            overviews = read_overviews(session.connection(), [1, 2, 3])
            assert {k: (w, p.lists()) for k, (w, p) in overviews.items()} == {
                1: (
                    1,
                    (
                        [0, 1, 2**33],
                        [2.302585, None, 0.0123],
                        [1763630000.25, 1763630000.5, 1763630001.0],
                    ),
                ),
                2: (1, ([0], [0.975], [1763630002.0])),
                3: (1, ([0], [9.5], [1763630003.0])),
            }

        # the current ORM reads the old rows, and new rows get fresh ids past the old ones
        with Session(engine) as session:
            run = session.get(Run, 1)
            assert run is not None and run.config == RUN_CONFIG and run.priority == 0
            assert run.seed == 2**40 + 7 and run.metrics_offset == 123456
            user = User(
                username="newcomer",
                password_hash="x",
                role="member",
                is_active=True,
                created_at=T0,
            )
            session.add(user)
            session.flush()
            assert user.id == 3
            session.rollback()

        migrate.downgrade(url, "base")
        engine.dispose()
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        migrate.upgrade(url)
        engine.dispose()
        assert migrate.current_revision(engine) == migrate.head_revision(url)
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())


def _overview_storage(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        return str(
            conn.exec_driver_sql(
                "SELECT attstorage FROM pg_attribute "
                "WHERE attrelid = 'metric_overviews'::regclass AND attname = 'data'"
            ).scalar_one()
        )


@pytest.mark.postgres_only
def test_overviews_are_stored_uncompressed_on_postgresql(tmp_path) -> None:
    """0026: each ingest batch rewrites its keys' overviews, and pglz compressing them was most
    of PostgreSQL's CPU under a flood (issue 27). EXTERNAL: out of line, not compressed."""
    assert "postgresql" in KINDS, "needs TORCHYARD_TEST_POSTGRES_URL (the services pass sets it)"
    with own_database("postgresql", tmp_path, "ty_ovstore", revision="0025") as engine:
        url = engine.url.render_as_string(hide_password=False)
        assert _overview_storage(engine) == "x"  # EXTENDED: compressed, then out of line
        migrate.upgrade(url)
        assert _overview_storage(engine) == "e"
        migrate.downgrade(url, "0025")
        assert _overview_storage(engine) == "x"
