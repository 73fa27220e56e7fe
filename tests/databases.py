"""Throwaway databases at Alembic head, for tests that need a database of their own, and
sessions whose writes are rolled back when the test ends (the `db` fixture of conftest.py)."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine
from app.migrate import upgrade

# `make test` sets it in both passes, so tests parametrized over it are not skipped in CI.
POSTGRES_URL = os.environ.get("TORCHYARD_TEST_POSTGRES_URL", "")
KINDS = ["sqlite", *(["postgresql"] if POSTGRES_URL else [])]


# Alembic head, migrated once per test process and copied for each database a test asks for:
# a run of the 18 migrations costs 0.5 s on SQLite and 2 s on PostgreSQL, a copy a few ms
# (SQLite's backup API) or 0.2 s (PostgreSQL's CREATE DATABASE ... TEMPLATE). Only head is
# copied: a test that asks for another revision, and tests/test_migrations.py, run Alembic.
_head_templates: dict[str, str] = {}


def _sqlite_head_template() -> str:
    if "sqlite" not in _head_templates:
        directory = Path(tempfile.mkdtemp(prefix="torchyard-head-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = directory / "head.db"
        upgrade(f"sqlite:///{path}", "head")
        _head_templates["sqlite"] = str(path)
    return _head_templates["sqlite"]


def sqlite_at_head(path: Path) -> None:
    """`path` at Alembic head: a copy of the migrated template when the file is new; a file
    that is there already (a fixture reusing its name) is upgraded in place, as before."""
    if path.exists():
        upgrade(f"sqlite:///{path}", "head")
        return
    src, dst = sqlite3.connect(_sqlite_head_template()), sqlite3.connect(path)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _postgres_head_template(admin: Engine) -> str:
    """A database at head that CREATE DATABASE copies; dropped when the process ends. Nothing
    stays connected to it (PostgreSQL refuses to copy a template that has sessions)."""
    if "postgresql" not in _head_templates:
        name = f"ty_head_{os.getpid()}_{secrets.token_hex(3)}"
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        atexit.register(_drop_postgres_database, name)
        upgrade(make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False))
        with admin.connect() as conn:  # nor does autovacuum connect to it from now on
            conn.exec_driver_sql(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false")
        _head_templates["postgresql"] = name
    return _head_templates["postgresql"]


def _drop_postgres_database(name: str) -> None:
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        admin.dispose()


@contextmanager
def own_database(
    kind: str, directory: Path, prefix: str, revision: str = "head"
) -> Iterator[Engine]:
    """A fresh SQLite file, or a PostgreSQL database created here and dropped after; its schema
    at `revision` (Alembic head unless told: then a copy of the session's migrated template)."""
    if kind == "sqlite":
        path = directory / f"{prefix}.db"
        url = f"sqlite:///{path}"
        if revision == "head":
            sqlite_at_head(path)
        else:
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
    template = _postgres_head_template(admin) if revision == "head" else None
    with admin.connect() as conn:
        conn.exec_driver_sql(
            f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else "")
        )
    try:
        url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        if template is None:
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
    from app.auth.service import create_user, issue_token

    with Session(engine) as session:
        user = create_user(session, username=username, password=secrets.token_hex(8))
        token = issue_token(session, user=user, ttl_hours=1)
        session.commit()
    return token


def savepoint_engine(url: str) -> Engine:
    """An engine for rolled_back(): one outer transaction per connection with SAVEPOINTs in it.

    pysqlite handles transactions itself: it sends BEGIN only before an INSERT/UPDATE/DELETE
    and none before a SAVEPOINT, so a rollback at the end would not undo what the test wrote.
    On SQLite the driver's handling is switched off and the engine sends its own BEGIN
    (SQLAlchemy's documented recipe), IMMEDIATE: the write lock from the start, so a writer
    elsewhere (the live stack's worker) waits for the test instead of making the test's first
    write fail on a stale snapshot. PostgreSQL needs nothing. No pool: each test a fresh
    connection, nothing left over from the one before."""
    engine = make_engine(url, pooled=False)
    if engine.dialect.name == "sqlite":

        def no_driver_transactions(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None

        def begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        event.listen(engine, "connect", no_driver_transactions)
        event.listen(engine, "begin", begin)
    return engine


@contextmanager
def savepoints_on(engine: Engine) -> Iterator[Engine]:
    """savepoint_engine() on the database of `engine` (an own_database()'s), disposed after."""
    rollback = savepoint_engine(engine.url.render_as_string(hide_password=False))
    try:
        yield rollback
    finally:
        rollback.dispose()


@contextmanager
def rolled_back(engine: Engine) -> Iterator[sessionmaker[Session]]:
    """Sessions that all join one outer transaction, rolled back at the end: nothing written
    through them outlives the block (SQLAlchemy 2's "join a session into an external
    transaction"). A session's commit releases its SAVEPOINT, so the next session on the same
    connection sees it, and its rollback undoes only its own SAVEPOINT. `engine` comes from
    savepoint_engine(). Code under test that opens its own session (app.db.session_scope) is
    outside this transaction: it does not see these rows, and on SQLite it waits for the
    write lock this transaction holds."""
    with engine.connect() as connection:
        outer = connection.begin()
        try:
            yield sessionmaker(
                bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
            )
        finally:
            outer.rollback()
