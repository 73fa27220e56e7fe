"""tests/databases.py: the `db` fixture's rollback per test. A test's writes, commits
included, are gone for the next test and never seen outside it; a rollback inside a test undoes
only what came after its last commit (pysqlite's SAVEPOINTs work: savepoint_engine)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.auth.models import User
from app.db import make_engine, session_scope
from tests.conftest import DATABASE_URL

# One name for the two tests below: the first writes it, the second looks for it.
WRITTEN = f"rolled-back-{secrets.token_hex(6)}"
WRITES: list[str] = []


def _user_id(session: Session, username: str) -> int | None:
    return session.scalar(select(User.id).where(User.username == username))


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[Engine]:
    """A connection of its own, as another process has: it sees committed rows only."""
    engine = make_engine(DATABASE_URL, pooled=False)
    yield engine
    engine.dispose()


def test_a_test_writes_and_commits(db: Session, elsewhere: Engine) -> None:
    db.add(User(username=WRITTEN, password_hash="-"))
    db.commit()  # releases the test's SAVEPOINT; the outer transaction goes on
    assert _user_id(db, WRITTEN) is not None
    with session_scope() as app_session:  # the app's own sessions are the test's meanwhile
        assert _user_id(app_session, WRITTEN) is not None
    with Session(elsewhere) as outside:  # never committed: nobody else sees it
        assert _user_id(outside, WRITTEN) is None
    WRITES.append(WRITTEN)


def test_the_next_test_does_not_see_that_write(db: Session, elsewhere: Engine) -> None:
    assert WRITES == [WRITTEN], "runs after test_a_test_writes_and_commits (file order)"
    assert _user_id(db, WRITTEN) is None
    with Session(elsewhere) as outside:
        assert _user_id(outside, WRITTEN) is None


def test_a_rollback_undoes_only_what_came_after_the_last_commit(
    db_sessions: sessionmaker[Session],
) -> None:
    name = f"u-{secrets.token_hex(6)}"
    with db_sessions.begin() as first:
        first.add(User(username=name, password_hash="-"))
    with pytest.raises(IntegrityError), db_sessions.begin() as second:
        second.add(User(username=f"{name}-2", password_hash="-"))
        second.flush()
        second.add(User(username=name, password_hash="-"))  # taken: the unique index refuses
    with db_sessions() as third:
        assert _user_id(third, name) is not None
        assert _user_id(third, f"{name}-2") is None
