"""The SQLite broker's poll, asked of the database only when its file changed.

kombu's SQL transport has no way to wait for a message: it polls, every queue a worker
consumes, each poll two ORM queries and a `BEGIN IMMEDIATE` (SQLite's write lock). torchyard
polls every 50 ms (app/broker.py POLLING_INTERVAL: kombu's 1 s default was most of a run's
launch latency), so an idle embedded worker kept ~5% of a core busy asking an unchanged file
(stop 52: 4.9% measured, and the workers were the second largest CPU user of the CI run).

Every message a worker can take was written to the broker's file by a commit: an unchanged
file (the same modification time, size and inode, the main file's and its journal's) holds
nothing new since the last poll that found its queue empty. A poll of such a file answers
"empty" from a `stat` alone; the database is asked again as soon as either file changes, and in
any case RECHECK_SECONDS after the last time it was asked (a write in the same clock tick as
the one before, of the same size, is then found within that second: kombu's own default
interval). Other SQL brokers (PostgreSQL through `sqla+postgresql://`) are polled as before.
"""

from __future__ import annotations

import os
import time
from functools import cached_property
from queue import Empty
from typing import Any

from kombu.transport import sqlalchemy as kombu_sqla

RECHECK_SECONDS = 1.0
Signature = tuple[tuple[int, int, int] | None, ...]


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class GatedChannel(kombu_sqla.Channel):
    """kombu's SQL channel whose `_get` skips the query while the SQLite file is unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        # queue -> (the files' signature taken before the poll that found it empty, when)
        self._quiet: dict[str, tuple[Signature, float]] = {}

    @cached_property
    def _files(self) -> tuple[str, ...]:
        """The broker's file and its journals (none: not a SQLite file): the engine's URL, fixed
        for the channel's life, so read once rather than at every poll."""
        bind = self.session.bind
        path = bind.url.database if bind.dialect.name == "sqlite" else None
        if not path or path == ":memory:":
            return ()
        return (path, f"{path}-journal", f"{path}-wal")

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        files = self._files
        if not files:
            return super()._get(queue)  # type: ignore[no-untyped-call]
        signature = tuple(_stat(f) for f in files)
        now = time.monotonic()
        quiet = self._quiet.get(queue)
        if quiet is not None and quiet[0] == signature and now - quiet[1] < RECHECK_SECONDS:
            raise Empty()
        try:
            message = super()._get(queue)  # type: ignore[no-untyped-call]
        except Empty:
            # The signature from before the query: a commit after it changes the file, and
            # the next poll asks the database.
            self._quiet[queue] = (signature, now)
            raise
        self._quiet.pop(queue, None)
        return message


def gate_sqlite_polls() -> None:
    """Make kombu's SQL transport open gated channels (app/broker.py, for the SQLite broker)."""
    kombu_sqla.Transport.Channel = GatedChannel
