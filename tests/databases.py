"""Throwaway databases at Alembic head, for tests that need a database of their own."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, make_url

from app.db import make_engine
from app.migrate import upgrade

# `make test` sets it in both passes, so tests parametrized over it are not skipped in CI.
POSTGRES_URL = os.environ.get("TORCHYARD_TEST_POSTGRES_URL", "")
KINDS = ["sqlite", *(["postgresql"] if POSTGRES_URL else [])]


@contextmanager
def own_database(
    kind: str, directory: Path, prefix: str, revision: str = "head"
) -> Iterator[Engine]:
    """A fresh SQLite file, or a PostgreSQL database created here and dropped after; its schema
    at `revision` (Alembic head unless told)."""
    if kind == "sqlite":
        url = f"sqlite:///{directory / f'{prefix}.db'}"
        upgrade(url, revision)
        engine = make_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()
        return
    name = f"{prefix}_{secrets.token_hex(5)}"
    # pre_ping: a test may restart PostgreSQL while the database is in use.
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        upgrade(url, revision)
        engine = make_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def user_with_token(engine: Engine, username: str) -> str:
    """A user in a database of its own (a test stack's), and a bearer token for it."""
    from sqlalchemy.orm import Session

    from app.auth.service import create_user, issue_token

    with Session(engine) as session:
        user = create_user(session, username=username, password=secrets.token_hex(8))
        token = issue_token(session, user=user, ttl_hours=1)
        session.commit()
    return token
