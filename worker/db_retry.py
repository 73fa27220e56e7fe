"""A unit of work that must not be lost to a database restart (a finished job's last points,
its final status): tried again with backoff while the database is unreachable."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from app.db import Session, database_away, session_scope
from worker.backoff import Backoff

log = logging.getLogger(__name__)

DB_RETRY_SECONDS = 300.0
T = TypeVar("T")


def with_db(run_id: int, what: str, work: Callable[[Session], T]) -> T:
    """`work` in a unit of work of its own, tried again while the database is unreachable (up
    to DB_RETRY_SECONDS); any other error is raised at once. `work` must be safe to repeat
    (forward() and the lifecycle's guarded transitions are)."""
    backoff = Backoff(0.2)
    deadline = time.monotonic() + DB_RETRY_SECONDS
    while True:
        try:
            with session_scope() as session:
                return work(session)
        except Exception as exc:
            if not database_away(exc) or time.monotonic() > deadline:
                raise
            backoff.failed()
            log.warning("run %s: %s failed (%s); retry in %.1f s", run_id, what, exc, backoff.delay)
            time.sleep(backoff.delay)
