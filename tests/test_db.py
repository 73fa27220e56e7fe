"""app.db against a real PostgreSQL: which failures count as the database being away."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.db import database_away, make_engine
from tests.databases import POSTGRES_URL
from tests.waits import wait_for


@pytest.mark.postgres_only
def test_a_session_the_server_ended_idle_in_a_transaction_is_the_database_away() -> None:
    """A worker frozen inside a transaction (SIGSTOP, swapped out) has its session ended by
    PostgreSQL after db_idle_transaction_seconds; when it runs again its next statement fails
    with SQLSTATE 25P03 (raised as InternalError, the connection invalidated). The worker's
    retries (worker.db_retry.with_db) go by database_away: this must be one of its cases."""
    assert POSTGRES_URL, "needs TORCHYARD_TEST_POSTGRES_URL (the services pass sets it)"
    engine = make_engine(POSTGRES_URL, idle_transaction_seconds=0.2)
    watcher = make_engine(POSTGRES_URL, pooled=False)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()  # in a transaction

            def ended() -> bool:
                with watcher.connect() as w:
                    found = w.execute(
                        text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"),
                        {"pid": pid},
                    )
                    return found.scalar_one() == 0

            wait_for(ended, timeout=10, what="PostgreSQL ended the idle session")
            with pytest.raises(DBAPIError) as failed:
                conn.execute(text("SELECT 1"))
        assert getattr(failed.value.orig, "sqlstate", None) == "25P03"
        assert database_away(failed.value)
    finally:
        engine.dispose()
        watcher.dispose()
