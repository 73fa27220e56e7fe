"""Turns at ingestion for this worker's runs: who forwards the next batch.

Every running job has a thread in the worker that forwards its spool. Left to themselves,
twelve runs logging as fast as they can are twelve writers at SQLite's one write lock, each
retrying in its busy handler: nobody's turn is assured (SQLite's busy waiting is no queue), a
batch that waited past the busy timeout is parsed again from the start, and the API's own
writes (a token's last use, the reaper) wait behind all of them until they fail with
'database is locked'. Measured before this gate (issue 27): ingestion fell from 365k points/s
for one run to 12k/s for twelve, and runs stayed "running" minutes after their jobs ended.

So batches take turns here, in the worker, before they reach the database:
- one batch at a time on SQLite (its one writer), a few on PostgreSQL (row locks only, but
  the threads share one interpreter, so more would only add waiting);
- in the order they asked (a queue, not a scramble): with bounded batches
  (``forward_batch_bytes``) every run gets a turn every few tenths of a second;
- a run whose job has ended (its final drain) goes before the runs still training: its end
  (final status, the viewers' streams closing, the GPUs freed) is never held up by another
  run's backlog;
- on SQLite a heartbeat (worker.heartbeat) goes before every batch: the worker's liveness
  never waits behind ingestion. Left to SQLite's busy handler, it lost the write lock to the
  next batch over and over (the handler sleeps, the next batch takes the lock the moment the
  last one commits): with 12 jobs logging flat out, stamps came 60-78 s apart and the reaper
  failed live runs as "worker lost" (issue 39).
Between two turns the lock is free while the next batch is read and parsed (pysqlite begins
the write transaction at the first INSERT), which is when the API's writes get in.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache

from app.db import get_engine


class NoTurn(TimeoutError):
    """The batch's turn did not come within its timeout; nothing was done."""


class Turn(enum.IntEnum):
    """A batch's place in the queue: lower goes first."""

    LIVENESS = 0  # a heartbeat: one short UPDATE that says the worker is alive
    ENDING = 1  # the job has ended: its drain, then its final status
    LIVE = 2  # the job still trains


# Batches forwarded at once per database: SQLite has one writer; on PostgreSQL two overlap
# one batch's parsing with another's COPY.
SQLITE_WIDTH = 1
SERVER_WIDTH = 2


class IngestGate:
    """At most ``width`` holders at a time, granted by (turn, order of asking)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._holders = 0
        self._waiting: list[tuple[int, int]] = []
        self._tickets = itertools.count()

    @contextmanager
    def turn(self, turn: Turn, *, timeout: float | None = None) -> Iterator[None]:
        """Hold a turn for the body (one batch's unit of work, commit included). NoTurn when
        it was not given within ``timeout`` s: the watch loop heartbeats meanwhile (a run
        waiting behind many ended jobs' drains must not look lost) and asks again."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._freed:
            ticket = (int(turn), next(self._tickets))
            heapq.heappush(self._waiting, ticket)
            while self._holders >= self.width or self._waiting[0] != ticket:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._waiting.remove(ticket)
                    heapq.heapify(self._waiting)
                    self._freed.notify_all()
                    raise NoTurn(f"no ingestion turn within {timeout} s")
                self._freed.wait(left)
            heapq.heappop(self._waiting)
            self._holders += 1
            # The next in line may fit too (width > 1): let it look.
            self._freed.notify_all()
        try:
            yield
        finally:
            with self._freed:
                self._holders -= 1
                self._freed.notify_all()


@lru_cache
def ingest_gate() -> IngestGate:
    """This process's gate, its width set by the database it writes to."""
    return IngestGate(SQLITE_WIDTH if _sqlite() else SERVER_WIDTH)


def _sqlite() -> bool:
    return get_engine().dialect.name == "sqlite"


def liveness_turn() -> AbstractContextManager[None]:
    """Where a heartbeat writes from: on SQLite the next turn, ahead of every batch waiting
    (one writer: a batch holding the lock is the only thing it waits for); on PostgreSQL no
    turn at all (row locks: a heartbeat never waits for another run's batch)."""
    return ingest_gate().turn(Turn.LIVENESS) if _sqlite() else nullcontext()
