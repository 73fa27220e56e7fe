"""tests/freezing.py against a real SQLite writer: the helper sees the WAL write lock, and a
freeze never leaves the process holding it."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.freezing import freeze, holds_sqlite_write_lock, stopped
from tests.waits import wait_for

# Inside a write transaction most of the time: it takes the lock, holds it 20 ms, lets go 2 ms.
WRITER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
print("ready", flush=True)
while True:
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO t VALUES (1)")
    time.sleep(0.02)
    db.execute("COMMIT")
    time.sleep(0.002)
"""


def test_a_freeze_lands_between_write_transactions(tmp_path: Path) -> None:
    database = tmp_path / "busy.db"
    argv = [sys.executable, "-c", WRITER, str(database)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as writer:
        try:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
            wait_for(
                lambda: holds_sqlite_write_lock(writer.pid, database),
                timeout=10,
                every=0.001,
                what="the writer seen holding the lock",
            )
            for _ in range(5):
                freeze(writer, f"sqlite:///{database}")
                assert stopped(writer.pid)
                assert not holds_sqlite_write_lock(writer.pid, database)
                other = sqlite3.connect(database, timeout=1)  # not blocked by the frozen writer
                other.execute("INSERT INTO t VALUES (2)")
                other.commit()
                other.close()
                writer.send_signal(signal.SIGCONT)
        finally:
            writer.kill()


def test_on_postgresql_a_freeze_is_a_sigstop() -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeper:
        try:
            freeze(sleeper, "postgresql+psycopg://postgres@127.0.0.1:5432/test")
            assert stopped(sleeper.pid)
        finally:
            sleeper.kill()
