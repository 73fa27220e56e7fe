"""The schema comes only from Alembic, and every migration has a working downgrade."""

from __future__ import annotations

from sqlalchemy import inspect

from app import migrate
from app.db import Base, make_engine


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
