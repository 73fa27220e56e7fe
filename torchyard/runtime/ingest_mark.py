"""Backpressure on the spool: the reporter waits while the worker is far behind.

A job that logs as fast as it can writes points many times faster than the host can store
them (20 keys a step, hundreds of thousands of points a second; issue 27). Left alone, the
spool grows a backlog of minutes: the live viewers see the run minutes late, and the run is
finished only after the backlog is ingested (nothing may be lost), minutes after its job
ended. So the worker's forwarder writes, after every committed batch, how far it has ingested
(``metrics.ingested``: "<offset> <inode>", worker.ingest_mark) and the reporter's writer
holds back while more than ``backlog_bytes`` it wrote are not ingested yet: the training loop
then waits in ``log()`` (short sleeps), the backlog stays a few seconds of ingestion, and the
run is finished within seconds of its job's end.

It holds back only while the worker is alive: a mark older than ``fresh_seconds`` (a worker
stopped, frozen, or gone with its job left to train on), a mark of another file (an earlier
attempt's spool), no mark, or a process being stopped (SIGTERM: its points must reach the
file before the grace ends) and the writer writes at once, as without a worker. A normal job
never gets near the bound, so it never waits; with no variable set (outside the platform)
nothing here is ever read.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from torchyard.contract import SPOOL_BACKLOG_VAR, SPOOL_MARK_FRESH_VAR, SPOOL_MAX_AGE_VAR

DEFAULT_FRESH_SECONDS = 15.0
# How long the writer sleeps between two looks at the mark while it holds back.
POLL_SECONDS = 0.02
# The least the writer writes between two looks at the backlog.
MIN_CHUNK = 4096

# Set when the process is being stopped (torchyard.job's SIGTERM handler): write everything now.
_stopping = threading.Event()


def stop_waiting() -> None:
    """The process is being stopped: no writer holds back any more."""
    _stopping.set()


class Bounds(NamedTuple):
    """The launcher's bounds on a job's spool; 0 bytes: no backpressure at all."""

    backlog_bytes: int
    fresh_seconds: float
    max_age_seconds: float = 0.0


def from_env(environ: Mapping[str, str] | None = None) -> Bounds:
    """The bounds from the launcher's variables (none set, or one unreadable: off)."""
    env = os.environ if environ is None else environ
    try:
        backlog = int(env.get(SPOOL_BACKLOG_VAR) or 0)
        fresh = float(env.get(SPOOL_MARK_FRESH_VAR) or DEFAULT_FRESH_SECONDS)
        max_age = float(env.get(SPOOL_MAX_AGE_VAR) or 0.0)
    except ValueError:
        return Bounds(0, DEFAULT_FRESH_SECONDS)
    return Bounds(max(0, backlog), fresh, max(0.0, max_age))


def read_mark(
    path: Path, *, fresh_seconds: float, now: float | None = None
) -> tuple[int, int] | None:
    """(offset ingested, inode of the spool it is an offset of) when the mark is fresh; None
    when there is none, it is stale or it cannot be read."""
    mark = read_mark_share(path, fresh_seconds=fresh_seconds, now=now)
    return None if mark is None else (mark[0], mark[1])


def read_mark_share(
    path: Path, *, fresh_seconds: float, now: float | None = None
) -> tuple[int, int, int | None] | None:
    """read_mark and the worker's share for this job, when it wrote one: the backlog this job
    may hold while the worker ingests several flooding runs (worker.ingest_mark.share)."""
    try:
        with open(path, "rb") as f:
            stamp = os.fstat(f.fileno()).st_mtime
            text = f.read(64)
    except OSError:
        return None
    if (time.time() if now is None else now) - stamp > fresh_seconds:
        return None
    try:
        fields = [int(part) for part in text.split()]
    except ValueError:
        return None
    if len(fields) == 2:
        return fields[0], fields[1], None
    if len(fields) == 3 and fields[2] > 0:
        return fields[0], fields[1], fields[2]
    return None


class Backpressure:
    """The writer's side: ``wait(fd)`` returns once the spool behind ``fd`` may grow."""

    def __init__(
        self,
        mark: Path,
        *,
        backlog_bytes: int,
        fresh_seconds: float,
        max_age_seconds: float = 0.0,
    ) -> None:
        self.mark = mark
        self.backlog_bytes = backlog_bytes
        self.fresh_seconds = fresh_seconds
        self.max_age_seconds = max_age_seconds
        # (the spool's size after a write, when the write's oldest point was logged), oldest
        # first, down to the first write the mark has not passed.
        self._writes: deque[tuple[int, float]] = deque()
        # True while the writer holds back: log() then waits too, instead of queueing more.
        self.holding = False
        self.bound = backlog_bytes  # in force at the last look: the launcher's or the share

    def chunk_bytes(self) -> int:
        """How much the writer may write between two looks at the backlog: a quarter of the
        bound in force (the worker's share may be far below the writer's own chunk)."""
        return max(MIN_CHUNK, self.bound // 4)

    def wrote(self, size: int, oldest_logged: float) -> None:
        """A write brought the spool to `size` bytes; its oldest point was logged then."""
        if self.max_age_seconds > 0:
            self._writes.append((size, oldest_logged))

    def _too_old(self, ingested: int, now: float) -> bool:
        """Whether the oldest written point not ingested yet was logged over max_age ago."""
        writes = self._writes
        while writes and writes[0][0] <= ingested:
            writes.popleft()
        return bool(writes) and now - writes[0][1] > self.max_age_seconds

    def wait(self, fd: int) -> None:
        """Sleep while the written-but-not-ingested backlog exceeds the bound and the worker's
        mark is fresh (it is ingesting this very file). The bound is the launcher's, or the
        worker's share of it when the mark carries one: with twelve runs flooding one worker,
        each holding the whole bound made every point wait for twelve runs' backlogs (a
        minute on a loaded 2-core box; bench/flood.py)."""
        if self.backlog_bytes <= 0:
            return
        try:
            while not _stopping.is_set():
                info = os.fstat(fd)
                mark = read_mark_share(self.mark, fresh_seconds=self.fresh_seconds)
                if mark is None or mark[1] != info.st_ino:
                    self.bound = self.backlog_bytes
                    return
                share = mark[2]
                self.bound = self.backlog_bytes if share is None else min(share, self.backlog_bytes)
                if info.st_size - mark[0] <= self.bound and not self._too_old(mark[0], time.time()):
                    return
                self.holding = True
                time.sleep(POLL_SECONDS)
        finally:
            self.holding = False
