"""Engine, sessions and the one request session dependency.

The caller owns the transaction: the request dependency (or a worker task's `session_scope`)
commits on success and rolls back on error; service functions only flush.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Annotated, Any

from fastapi import Depends
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

# Re-exported: the worker types the session it passes to app services without SQLAlchemy.
from sqlalchemy.orm import Session as Session
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import NullPool

# Every mapper must be known before the first flush resolves foreign keys, whatever subset of
# the domains this process imported (a worker never imports the API routers).
import app.models  # noqa: F401
from app.settings import get_settings

# The largest id our primary keys hold (INTEGER: 32 bits on PostgreSQL). A larger id in a URL
# names nothing, and sent to the database it is an error (PostgreSQL: integer out of range;
# SQLite: past 64 bits, an overflow in the driver), so lookups answer "not found" first.
MAX_ID = 2**31 - 1


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def make_engine(url: str, *, pooled: bool = True, idle_transaction_seconds: float = 0) -> Engine:
    """Every engine of torchyard comes from here, so SQLite always gets WAL and its pragmas.
    ``idle_transaction_seconds``: PostgreSQL ends a session idle in a transaction that long
    (settings.db_idle_transaction_seconds says why)."""
    if url.startswith("sqlite"):
        kw: dict[str, Any] = {} if pooled else {"poolclass": NullPool}
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kw)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # PostgreSQL's JIT adds ~100 ms to a downsampling query and helps none of ours.
    options = "-c jit=off"
    if idle_transaction_seconds > 0:
        timeout_ms = int(idle_transaction_seconds * 1000)
        options += f" -c idle_in_transaction_session_timeout={timeout_ms}"
    pg: dict[str, Any] = {"connect_args": {"options": options}} if "postgresql" in url else {}
    if not pooled:
        return create_engine(url, poolclass=NullPool, **pg)
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, **pg)


@lru_cache
def get_engine() -> Engine:
    settings = get_settings()
    if settings.resolved_database_url.startswith("sqlite"):
        settings.make_data_dir()
    return make_engine(
        settings.resolved_database_url,
        idle_transaction_seconds=settings.db_idle_transaction_seconds,
    )


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


# Where every session of this process comes from while a test binds them (tests/conftest.py):
# a sessionmaker on one connection whose outer transaction the test rolls back. None: the
# engine's own sessionmaker.
_bound: sessionmaker[Session] | None = None


@contextmanager
def sessions_bound_to(factory: sessionmaker[Session]) -> Iterator[None]:
    """Every session this process opens in the block (the request dependency, `session_scope`
    of background tasks, streams and periodic rounds) comes from `factory`. A hook for tests:
    they bind the app to one connection with an outer transaction that they roll back, as
    SQLAlchemy's "join a session into an external transaction" recipe does, so an API test
    leaves nothing in the shared database. The product never calls it."""
    global _bound
    previous, _bound = _bound, factory
    try:
        yield
    finally:
        _bound = previous


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run `callback` once the unit of work has committed (e.g. enqueue a task for a new row,
    which must not reach a worker before the row is visible)."""
    session.info.setdefault("after_commit", []).append(callback)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A unit of work: commit on success, roll back on error, then run after-commit hooks."""
    session = (_bound or get_sessionmaker())()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        callbacks = session.info.pop("after_commit", [])
        session.close()
    for callback in callbacks:
        callback()


def get_db() -> Iterator[Session]:
    with session_scope() as session:
        yield session


# scope="function": commit before the response goes out, so a client that gets 201 can read it.
SessionDep = Annotated[Session, Depends(get_db, scope="function")]


def database_away(exc: BaseException) -> bool:
    """The database cannot be reached right now (a restart, SQLite's lock held too long, a
    connection cut by pg_terminate_backend or a failover): worth waiting for, unlike an error
    in what was sent. Here so the host agent can tell the two apart without knowing the
    database library; the API answers such a request 503 with Retry-After
    (app/http_errors.py) and an event stream polls again (app/runs/streams/events.py)."""
    return isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


def database_locked(exc: BaseException) -> bool:
    """SQLite's "database is locked": its busy timeout ran out while another writer held the
    one write lock. Nothing was written; trying again at once is right."""
    return isinstance(exc, OperationalError) and "database is locked" in str(exc)


def is_conflict(exc: BaseException) -> bool:
    """The database refused a row that breaks a unique constraint (two actors took the same
    thing, e.g. one GPU leased twice): nothing of the unit of work was kept."""
    return isinstance(exc, IntegrityError)
