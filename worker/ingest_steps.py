"""One run's ingestion steps (forward the spool, record the environment, sample the system
series, judge a sweep's trial), each in a unit of work of its own, run so that no error in
them reaches the loop that watches the job: the job keeps heartbeating and can still be
cancelled whatever ingestion does."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import TypeVar

from app.db import Session, database_away, session_scope
from app.runs.state.notices import note_ingest_error
from app.settings import get_settings
from worker.db_retry import with_db
from worker.ingest_gate import NoTurn, Turn, ingest_gate

log = logging.getLogger(__name__)

T = TypeVar("T")


class IngestSteps:
    """A database that is away is retried (the spool keeps everything); anything else (a bug,
    a row the database refuses) is logged, said once on the run (app.runs.state.notices), and the
    step answers ``default``, and is tried again only RETRY_AFTER_ERROR later."""

    RETRY_AFTER_ERROR = 5.0

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.healthy = True
        # The last step waited its whole timeout at the ingestion gate (other runs' turns):
        # the worker is alive, only busy (worker.watch keeps the job's mark fresh then).
        self.no_turn = False
        self._paused_until = 0.0

    def step(
        self,
        what: str,
        work: Callable[[Session], T],
        default: T,
        *,
        retry: bool = False,
        turn: Turn | None = None,
    ) -> T:
        """`work`'s answer; ``default`` when it failed or is paused after an error. With
        ``retry`` a database that is away is waited for (worker.db_retry). With ``turn`` (a
        forwarder batch) the unit of work waits for its turn at the process's ingestion gate
        (worker.ingest_gate) and holds it to its commit."""
        self.no_turn = False
        if time.monotonic() < self._paused_until:
            return default
        # A live batch waits at most a heartbeat interval: the loop heartbeats, then asks again.
        wait = get_settings().run_heartbeat_seconds if turn is Turn.LIVE else None
        try:
            with nullcontext() if turn is None else ingest_gate().turn(turn, timeout=wait):
                if retry:
                    return with_db(self.run_id, what, work)
                with session_scope() as session:
                    return work(session)
        except NoTurn:
            self.no_turn = True
            return default
        except Exception as exc:
            if database_away(exc) and not retry:
                log.warning("run %s: %s failed (%s); will retry", self.run_id, what, exc)
                return default
            log.exception("run %s: %s failed", self.run_id, what)
            self.healthy = False
            self._paused_until = time.monotonic() + self.RETRY_AFTER_ERROR
            # The first line only: SQLAlchemy adds the statement and its parameters below it.
            first = (str(exc).splitlines() or [""])[0]
            self._note(f"{what}: {type(exc).__name__}: {first}")
            return default

    def _note(self, error: str) -> None:
        try:
            with session_scope() as session:
                note_ingest_error(session, run_id=self.run_id, error=error)
        except Exception:
            log.exception("run %s: could not note the ingestion error", self.run_id)
