"""The event streams' shared poll threads, handed out fairly between users.

Every open stream (app/runs/streams/events.py) polls the database in a thread; all streams of a
server process share `POLL_THREADS` of them, so 20 viewers hold at most that many pooled connections
(bench/load.py). Which waiting poll gets a free thread:

- a user's polls hold at most `POLL_THREADS - 1` threads at once, so while one user's streams
  are busy another user's poll finds a thread free at once (tests/test_event_stream_fairness.py);
- a freed thread goes to the user with the fewest polls running, the one waiting longest
  among equals, so several busy users share the threads evenly.

It was one poll at a time per user: twelve viewers of one user (a team's shared account, a
dashboard of twelve runs, bench/flood.py) took turns on one thread while three stood idle, and
each stream managed about three polls a second where a flooding run needed seven to twelve.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.lowlevel import RunVar

POLL_THREADS = 4


@dataclass
class _Waiter:
    user: int | None
    since: float
    granted: anyio.Event = field(default_factory=anyio.Event)


class FairPool:
    """`size` slots shared by users: at most `per_user` each, a free slot to the waiting user
    with the fewest slots held (then the longest wait). One event loop's object: every call
    runs on that loop, so no lock is needed."""

    def __init__(self, size: int, per_user: int) -> None:
        self.size = size
        self.per_user = max(1, per_user)
        self.held: dict[int | None, int] = {}
        self.waiting: dict[int | None, deque[_Waiter]] = {}

    @property
    def busy(self) -> int:
        return sum(self.held.values())

    def _may_start(self, user: int | None) -> bool:
        return self.busy < self.size and self.held.get(user, 0) < self.per_user

    @asynccontextmanager
    async def slot(self, user: int | None) -> AsyncIterator[None]:
        """Hold one slot for `user` (None: a stream without a user, counted as one user)."""
        if not self.waiting.get(user) and self._may_start(user):
            self.held[user] = self.held.get(user, 0) + 1
        else:
            waiter = _Waiter(user, time.monotonic())
            self.waiting.setdefault(user, deque()).append(waiter)
            try:
                await waiter.granted.wait()
            except BaseException:
                if waiter.granted.is_set():
                    self._release(user)  # granted as it was cancelled: pass it on
                else:
                    self._forget(waiter)
                raise
        try:
            yield
        finally:
            self._release(user)

    def _forget(self, waiter: _Waiter) -> None:
        queue = self.waiting.get(waiter.user)
        if queue is not None:
            queue.remove(waiter)
            if not queue:
                del self.waiting[waiter.user]

    def _release(self, user: int | None) -> None:
        left = self.held.get(user, 1) - 1
        if left > 0:
            self.held[user] = left
        else:
            self.held.pop(user, None)
        self._grant()

    def _grant(self) -> None:
        """Hand free slots to waiters: the fewest held first, then the longest waiting."""
        while self.busy < self.size:
            ready = [u for u, q in self.waiting.items() if self.held.get(u, 0) < self.per_user]
            if not ready:
                return
            user = min(ready, key=lambda u: (self.held.get(u, 0), self.waiting[u][0].since))
            queue = self.waiting[user]
            waiter = queue.popleft()
            if not queue:
                del self.waiting[user]
            self.held[user] = self.held.get(user, 0) + 1
            waiter.granted.set()


_POOL: RunVar[tuple[FairPool, anyio.CapacityLimiter]] = RunVar("torchyard_sse_poll_pool")


def _pool() -> tuple[FairPool, anyio.CapacityLimiter]:
    """One pool per event loop (an anyio limiter belongs to the loop it was made in)."""
    try:
        return _POOL.get()
    except LookupError:
        pool = (FairPool(POLL_THREADS, POLL_THREADS - 1), anyio.CapacityLimiter(POLL_THREADS))
        _POOL.set(pool)
        return pool


async def run_polled(user_id: int | None, func: Any, *args: Any) -> tuple[Any, float]:
    """`func(*args)` in one of the poll threads once `user_id`'s turn comes; with the seconds
    it waited for the thread (its turn, then the thread's start)."""
    fair, threads = _pool()
    asked = time.perf_counter()
    started: list[float] = []

    def timed() -> Any:
        started.append(time.perf_counter())
        return func(*args)

    async with fair.slot(user_id):
        result = await anyio.to_thread.run_sync(timed, limiter=threads)
    return result, started[0] - asked
