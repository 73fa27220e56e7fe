"""The job's metric reporter: an in-memory buffer drained to metrics.jsonl by a thread.

The training loop must never wait on disk or on a lock to report a number, so ``log()``
only converts the values and appends one tuple to a deque; a daemon thread wakes every
``interval`` seconds, takes everything queued so far and appends it to the spool with one
write and one flush. The worker's forwarder tails that file, so a point is durable (in the
OS) within ~``interval`` seconds and survives a crash of this process after that.

With a bound on the spool's backlog (torchyard.runtime.ingest_mark, set by the launcher) the
writer holds back while the worker is far behind, and ``log()`` waits while it does, so a job
that logs faster than the host can store its points never runs minutes ahead of its viewers.

A deque rather than a swapped list: ``deque.append`` and ``popleft`` are atomic, so the
writer can take exactly the items that were there when it looked without a lock; swapping
a list can lose an append that loaded the old list just before the swap.

Line format (docs/architecture.md)::

    {"type": "metrics", "step": 12, "time": 1763761234.51, "values": {"train/loss": 0.41}}
    {"type": "checkpoint", "name": "epoch-0003.pt", "path": "checkpoints/epoch-0003.pt",
     "epoch": 3, "step": 135, "size_bytes": 48211, "time": 1763761240.02}
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from torchyard.contract import RunPaths, spool_value
from torchyard.runtime.ingest_mark import POLL_SECONDS, Backpressure

DEFAULT_INTERVAL = 0.15
# Backpressure: past this many queued items log() waits for the writer instead of growing
# memory without bound (only a loop that logs far faster than disk can write gets here).
DEFAULT_MAX_PENDING = 200_000
# While the writer holds back for ingestion, log() waits past this many queued items.
HELD_PENDING = 1_000
# The writer writes at most about this many characters before it looks at the backlog again.
WRITE_CHUNK = 256 * 1024


class ReporterError(RuntimeError):
    """The background writer failed; the cause is chained as ``__cause__``."""


def _to_float(value: Any) -> float | str | None:
    """float(value) as the spool carries it: NaN as None, +/-inf as their tokens (JSON has no
    literal for them; torchyard.contract.spool_value)."""
    number = float(value)
    return number if math.isfinite(number) else spool_value(number)


class Reporter:
    """Appends metric and checkpoint lines to ``path`` without blocking the caller.

    With ``enabled=False`` or ``path=None`` (any rank but 0, or a script run outside the
    platform) it is a no-op twin with the same API, so training code never branches on it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        enabled: bool = True,
        *,
        interval: float = DEFAULT_INTERVAL,
        max_pending: int = DEFAULT_MAX_PENDING,
        backlog_bytes: int = 0,
        fresh_seconds: float = 15.0,
        max_age_seconds: float = 0.0,
    ) -> None:
        self.path: Path | None = Path(path) if path is not None else None
        self.enabled = bool(enabled) and self.path is not None
        self._interval = interval
        self._max_pending = max_pending
        self._limit = max_pending
        self._backpressure: Backpressure | None = None
        self._queue: deque[Any] = deque()
        self._error: BaseException | None = None
        self._closed = False
        self._stopping = False
        self._wake = threading.Event()
        self._file: Any = None
        self._thread: threading.Thread | None = None
        if not self.enabled:
            return
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Opened here, not in the thread, so a bad path fails at construction time.
        self._file = open(self.path, "a", encoding="utf-8", newline="\n")
        self._pid = os.getpid()
        if backlog_bytes > 0:
            self._backpressure = Backpressure(
                RunPaths(self.path.parent).ingested,
                backlog_bytes=backlog_bytes,
                fresh_seconds=fresh_seconds,
                max_age_seconds=max_age_seconds,
            )
            self._limit = min(max_pending, HELD_PENDING)
        self._thread = threading.Thread(target=self._run, name="torchyard-reporter", daemon=True)
        self._thread.start()
        # Daemon threads are frozen at interpreter exit, but atexit runs before that: this
        # is what drains the buffer when a script simply returns without close().
        atexit.register(self.close)

    # -- hot path ---------------------------------------------------------------------

    def log(self, step: int, values: Mapping[str, Any] | None = None, /, **metrics: Any) -> None:
        """Record metrics for optimizer step ``step`` (>= 1).

        Pass them as a mapping (``log(7, {"train/loss": x})``, handy for keys with a slash)
        or as keywords. Values are anything ``float()`` accepts (Python and numpy numbers,
        0-d tensors). Costs a few microseconds and never touches the disk.
        """
        if not self.enabled:
            return
        if self._error is not None or self._closed:
            self._raise_unusable()
        source = metrics if values is None else {**values, **metrics} if metrics else values
        if not source:
            return
        if step < 1:
            raise ValueError(f"steps start at 1 (the number of optimizer steps done), got {step}")
        converted = {str(key): _to_float(value) for key, value in source.items()}
        self._queue.append((int(step), time.time(), converted))
        if len(self._queue) > self._limit:
            self._make_room()

    def _make_room(self) -> None:
        """With backpressure, wait past HELD_PENDING queued items until the writer has taken
        them, whether it is holding back or still writing its last batch: waiting only while
        it held back let a flooding loop queue up to max_pending items (minutes of points)
        while the writer encoded, and one run alone lagged its viewers by 30 s (bench/flood.py).
        Past ``max_pending`` items, wait for the writer (memory without bound otherwise)."""
        held = self._backpressure
        while held is not None and len(self._queue) > HELD_PENDING and self._error is None:
            self._wake.set()
            time.sleep(POLL_SECONDS)
        if len(self._queue) > self._max_pending:
            self.flush()

    # -- rarer calls -------------------------------------------------------------------

    def record_checkpoint(
        self, *, name: str, path: str, epoch: int, step: int, size_bytes: int
    ) -> None:
        """Record a checkpoint whose file is already in place (``path`` relative to the run
        directory); it goes through the same queue, so it lands after earlier metrics."""
        if not self.enabled:
            return
        if self._error is not None or self._closed:
            self._raise_unusable()
        self._queue.append(
            {
                "type": "checkpoint",
                "name": name,
                "path": path,
                "epoch": int(epoch),
                "step": int(step),
                "size_bytes": int(size_bytes),
                "time": time.time(),
            }
        )

    def record_config(self, values: Mapping[str, Any]) -> None:
        """Record the script's own config (``torchyard.init(config=...)``, JSON-safe, nested
        as given): the worker stores it as the run's params beside the launch's."""
        if not self.enabled:
            return
        if self._error is not None or self._closed:
            self._raise_unusable()
        self._queue.append({"type": "config", "values": dict(values), "time": time.time()})

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything logged before this call is written and flushed."""
        if not self.enabled or self._closed:
            return
        done = threading.Event()
        self._queue.append(done)
        self._wake.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done.wait(0.05):
            assert self._thread is not None
            if not self._thread.is_alive():
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"metrics writer did not flush within {timeout} s")
        if self._error is not None:
            self._raise_unusable()

    def close(self) -> None:
        """Drain the buffer, fsync and close the file; re-raise a writer error if any.

        Idempotent; also runs at interpreter exit.
        """
        if not self.enabled or self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if os.getpid() != self._pid:
            # A forked child (os.fork in user code) inherits a copy of the buffer but not the
            # writer thread; writing the copy would duplicate the parent's lines.
            return
        self._stopping = True
        self._wake.set()
        assert self._thread is not None
        self._thread.join()
        try:
            if self._error is None:
                self._file.flush()
                os.fsync(self._file.fileno())
        except OSError as exc:
            self._error = exc
        finally:
            try:
                self._file.close()
            except OSError as exc:
                self._error = self._error or exc
        if self._error is not None:
            raise ReporterError(f"writing {self.path} failed: {self._error!r}") from self._error

    def __enter__(self) -> Reporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        # Do not mask the exception that is already propagating with a writer error.
        try:
            self.close()
        except ReporterError:
            pass

    # -- writer thread -----------------------------------------------------------------

    def _raise_unusable(self) -> None:
        if self._error is not None:
            raise ReporterError(f"writing {self.path} failed: {self._error!r}") from self._error
        raise ValueError("the reporter is closed")

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(self._interval)
                self._wake.clear()
                # Read the flag before draining: everything queued before close() set it
                # is then guaranteed to be in this last drain.
                stopping = self._stopping
                self._drain()
                if stopping:
                    return
        except BaseException as exc:  # a dead writer must not fail silently
            self._error = exc

    def _drain(self) -> None:
        queue = self._queue
        count = len(queue)
        if not count:
            return
        lines: list[str] = []
        stamps: list[float] = []  # when each line's point was logged (the spool's age bound)
        waiters: list[threading.Event] = []
        for _ in range(count):
            item = queue.popleft()
            if type(item) is tuple:
                step, stamp, values = item
                lines.append(_encode_metrics(step, stamp, values))
                stamps.append(stamp)
            elif type(item) is dict:
                lines.append(json.dumps(item, allow_nan=False) + "\n")
                stamps.append(time.time())
            else:
                waiters.append(item)
        if lines and self._error is None:
            try:
                self._write(lines, stamps)
            except BaseException as exc:  # surfaced on the next log() and on close()
                self._error = exc
        # Waiters are released only after the lines queued before them reached the file.
        for waiter in waiters:
            waiter.set()

    def _write(self, lines: list[str], stamps: list[float]) -> None:
        """Append the lines; with backpressure, in chunks, each once the backlog allows (and
        noted with when its first point was logged: the age bound's clock)."""
        held = self._backpressure
        if held is None:
            self._file.write("".join(lines))
            self._file.flush()
            return
        start, size = 0, 0
        chunk = min(WRITE_CHUNK, held.chunk_bytes())
        for i, line in enumerate(lines):
            size += len(line)
            if size >= chunk or i == len(lines) - 1:
                held.wait(self._file.fileno())
                self._file.write("".join(lines[start : i + 1]))
                self._file.flush()
                held.wrote(os.fstat(self._file.fileno()).st_size, stamps[start])
                start, size = i + 1, 0
                chunk = min(WRITE_CHUNK, held.chunk_bytes())


_encoded_keys: dict[str, str] = {}


def _encode_metrics(step: int, stamp: float, values: Mapping[str, float | str | None]) -> str:
    """One metrics line, formatted by hand: half the cost of json.dumps of the same dict,
    and the writer holds the GIL while it formats, so this is time taken from training.

    ``repr`` of a finite float is valid JSON and round-trips exactly; keys are JSON-encoded
    once and cached, since a run uses a handful of keys millions of times. A str value is
    an infinity's token ("Infinity", "-Infinity"), written as a JSON string.
    """
    parts = []
    for key, value in values.items():
        encoded = _encoded_keys.get(key)
        if encoded is None:
            encoded = _encoded_keys[key] = json.dumps(key)
        text = repr(value) if type(value) is float else "null" if value is None else f'"{value}"'
        parts.append(f"{encoded}: {text}")
    joined = ", ".join(parts)
    return f'{{"type": "metrics", "step": {step}, "time": {stamp!r}, "values": {{{joined}}}}}\n'
