"""The host's advisory file locks (flock): how the worker's processes and threads, and a second
worker on the same data dir, share the environment cache, the unpacked snapshots and the job
base (building one while another waits; evicting only what nobody holds)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def flock(path: Path, mode: int = fcntl.LOCK_EX) -> Iterator[bool]:
    """The lock held while the block runs; with LOCK_NB, yields False when it is held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock
