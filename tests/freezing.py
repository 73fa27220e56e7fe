"""Freezing a process with SIGSTOP where a test means it: between its SQLite write transactions.

On SQLite (WAL) a process frozen inside a write transaction keeps the database's one write
lock, and every other writer, the reaper too, waits for it until it runs again (docs/deploy.md,
the faults table: use PostgreSQL where hosts may stall). A test of what the rest of torchyard
does while a worker is frozen freezes it outside that lock; otherwise about one freeze in 40
of a worker with two runs lands inside it (sampled), and nothing can happen until SIGCONT.

The lock shows in /proc/locks: SQLite's WAL write lock is a POSIX write lock on byte 120 of
the database's -shm file. On PostgreSQL nothing is checked: the server ends a session frozen
inside a transaction (settings.db_idle_transaction_seconds).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

from tests.waits import wait_for

WAL_WRITE_LOCK_BYTE = "120"


def holds_sqlite_write_lock(pid: int, database: Path) -> bool:
    """Whether process ``pid`` (any of its threads) holds ``database``'s WAL write lock."""
    try:
        shm = os.stat(f"{database}-shm")
    except FileNotFoundError:
        return False
    inode = f"{os.major(shm.st_dev):02x}:{os.minor(shm.st_dev):02x}:{shm.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[1:5] == ["POSIX", "ADVISORY", "WRITE", str(pid)]:
            if fields[5] == inode and fields[6] == WAL_WRITE_LOCK_BYTE:
                return True
    return False


def stopped(pid: int) -> bool:
    """Every thread of ``pid`` stopped (SIGSTOP reaches them asynchronously)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:  # a thread that ended since the listing stops nothing
            states.append((task / "stat").read_bytes().rsplit(b")", 1)[1].split()[0])
        except FileNotFoundError:
            continue
    return all(state in (b"T", b"t") for state in states)


def freeze(process: subprocess.Popen[Any], database_url: str, timeout: float = 30) -> None:
    """SIGSTOP ``process``; on SQLite, again until it is frozen between write transactions."""
    url = make_url(database_url)
    database = Path(url.database) if url.get_backend_name() == "sqlite" and url.database else None

    def frozen_outside_writes() -> bool:
        process.send_signal(signal.SIGSTOP)
        wait_for(lambda: stopped(process.pid), timeout=5, every=0.001, what="SIGSTOP took")
        if database is None or not holds_sqlite_write_lock(process.pid, database):
            return True
        process.send_signal(signal.SIGCONT)
        wait_for(
            lambda: not holds_sqlite_write_lock(process.pid, database),
            timeout=10,
            every=0.001,
            what="the write transaction ended",
        )
        return False

    wait_for(frozen_outside_writes, timeout=timeout, every=0, what="frozen between writes")
