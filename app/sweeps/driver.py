"""What moves a sweep forward, outside a request: the `sweeps.advance` task (enqueued when a
trial's run ends, app.runs.state.lifecycle) and the safety net that re-advances every running sweep
(``advance_running_sweeps``, a periodic job: app/sweeps/scheduled.py).

Each advance is its own transaction. Two at once are serialized by the sweep's row lock; on
SQLite a second writer may instead fail to upgrade its snapshot, and a duplicate trial number
fails the primary key: either way that attempt is rolled back and tried again, and it then
sees what the first one did, so it never launches a trial twice.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError

from app.db import session_scope
from app.sweeps.models import Sweep, SweepStatus

log = logging.getLogger(__name__)

ATTEMPTS = 5


def advance_sweep(sweep_id: int) -> list[int]:
    """One advance, committed (its new runs enqueued after the commit); the new runs' ids."""
    from app.sweeps.service import advance

    for attempt in range(1, ATTEMPTS + 1):
        try:
            with session_scope() as session:
                return advance(session, sweep_id=sweep_id)
        except (IntegrityError, OperationalError) as exc:
            if attempt == ATTEMPTS:
                raise
            log.info("sweep %s: advance raced another (%s); again", sweep_id, type(exc).__name__)
            time.sleep(0.1 * attempt)
    return []


def running_sweeps() -> list[int]:
    with session_scope() as session:
        return list(session.scalars(select(Sweep.id).where(Sweep.status == SweepStatus.running)))


def advance_running_sweeps() -> None:
    """The safety net's one pass: each running sweep advanced (an error logged, not raised:
    one broken sweep must not stop the others')."""
    for sweep_id in running_sweeps():
        try:
            advance_sweep(sweep_id)
        except Exception:
            log.exception("sweep %s: advance failed", sweep_id)
