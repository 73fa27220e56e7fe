"""The live stream of one run: new metric points, status changes and log lines, as SSE.

A client that already holds part of the run (the run page fetches the downsampled history and
the log's tail first) starts the stream from there: `after` gives the last step it has per
key and `log_offset` the log position; by default the stream starts from nothing.

Each poll reads what is new since the last one (points past each key's last step, log bytes
past the last offset, the status when it changed) in a short session of its own, so a viewer
holds no connection while it waits. The stream ends after the run has finished and the last
points and log lines went out.

Streams cannot starve each other: a stream is a coroutine (no thread of its own); its polls run
in a small shared thread pool handed out fairly (app/runs/streams/poll_pool.py: one user's polls
hold all threads but one, a freed thread goes to the user holding fewest), and each poll reads at
most KEY_WINDOW keys (a run with 100,000 keys is swept a window per poll). So a user with many
tabs on a huge run holds a few pool threads for a short while per poll, and another user's poll
gets a thread at once. A user may hold at most `sse_max_streams_per_user` open streams (429
beyond).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio
import orjson
from fastapi.sse import ServerSentEvent
from sqlalchemy import bindparam, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.db import database_away, session_scope
from app.errors import Invalid, TooMany
from app.metrics.live_read import NEW_POINTS_LIMIT, key_window, read_new_points
from app.ops import shutdown
from app.ops.prometheus import EVENT_STREAMS, STREAM_POLL_SECONDS
from app.runs.files.logs import log_source
from app.runs.models import Run, RunStatus
from app.runs.state.phase import phase_of
from app.runs.streams.poll_pool import run_polled
from app.timeutil import as_utc

MAX_LOG_CHUNK = 256 * 1024
# A quiet stream sends a `ping` event this often (keep-alive comments in between, which a
# browser's EventSource never shows to the page): a page that hears nothing for a few of these
# knows the server is gone even when no connection reset told it (a cut network, a frozen
# proxy), and stops saying "live" (app/static/run.js).
PING_SECONDS = 10.0
# The reconnect delay a stream asks for as it ends because the server is stopping.
RECONNECT_MS = 1000
# Keys one poll reads: a window of the run's keys (by name), the next window on the next poll.
KEY_WINDOW = 2000


@dataclass
class StreamCursor:
    run_id: int
    last_steps: dict[str, int] = field(default_factory=dict)
    log_offset: int = 0
    status: str | None = None
    attempt: int | None = None  # with status: a new attempt is news even at the same status
    # With status too: the build's phase and pip's last line are news while it builds.
    building: tuple[Any, ...] = ()
    # Where the next poll's key window starts: None at the start of a sweep over all keys;
    # (key, True) to read that key again (a poll that stopped at the point limit inside it).
    window_start: tuple[str, bool] | None = None
    # Whether the run had finished when the current sweep began, and whether the sweep has
    # found nothing new since: a finished run's stream ends after one whole quiet sweep.
    sweep_after_finish: bool = False
    sweep_quiet: bool = True
    # The last poll stopped at its point limit: more is already stored, the next poll goes at
    # once (a viewer behind a flooding run waited the poll interval between every 20,000
    # points, a ceiling of 100,000 points/s at best, far less on a loaded box).
    behind: bool = False


def status_payload(run: Any) -> dict[str, Any]:
    """The `status` event's data, from a Run (or a row with its columns)."""
    phase = phase_of(run)
    return {
        # While it runs: "building environment" (pip's last line in env_build_line) or
        # "training" (app/runs/state/phase.py); sent again whenever the phase or the line changes.
        "phase": phase.phase,
        "env_build_line": run.env_build_line,
        "env_build_started_at": _iso(run.env_build_started_at),
        "env_build_seconds": phase.env_build_seconds,
        "training_started_at": _iso(run.training_started_at),
        "status": run.status,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "exit_code": run.exit_code,
        "error": run.error,
        # The attempt the server knows now: the page shows no other (a requeue by a lost
        # worker's reaper counts it up).
        "attempt": run.attempt,
    }


def _iso(value: datetime | None) -> str | None:
    return as_utc(value).isoformat() if value is not None else None


_STATUS_COLUMNS = select(
    Run.status,
    Run.started_at,
    Run.finished_at,
    Run.exit_code,
    Run.error,
    Run.attempt,
    Run.env_build_started_at,
    Run.env_build_line,
    Run.training_started_at,
).where(Run.id == bindparam("run_id"))


def json_event(event: str, data: Any, id: str | None = None) -> ServerSentEvent:
    """An event whose data is encoded here, in the polling thread: FastAPI would otherwise
    run each payload through jsonable_encoder on the event loop, which was a quarter of the
    server's time with 20 viewers on fast runs (bench/load.py). Non-finite values are already
    None (stored as NULL), so this is plain JSON. orjson: the stdlib encoder was a fifth of a
    catching-up poll's time (20,000 points; bench/flood.py)."""
    raw = orjson.dumps(data).decode()
    return ServerSentEvent(event=event, raw_data=raw, id=id)


def poll(cursor: StreamCursor) -> tuple[list[ServerSentEvent], bool]:
    """One round: the events to send, and whether the stream is complete. Its time goes into
    the poll histogram in two parts: `read` (the database and the log) and `encode` (JSON)."""
    began = time.perf_counter()
    with session_scope() as session:
        run = session.execute(_STATUS_COLUMNS, {"run_id": cursor.run_id}).one_or_none()
        if run is None:
            return [json_event("status", {"status": "deleted"})], True
        if cursor.window_start is None:
            cursor.sweep_after_finish = RunStatus(run.status).finished
            cursor.sweep_quiet = True
        series, sweep_done = _read_window(session, cursor)
    read = time.perf_counter()
    events: list[ServerSentEvent] = []
    building = (run.env_build_started_at, run.env_build_line, run.training_started_at)
    if (run.status, run.attempt, building) != (cursor.status, cursor.attempt, cursor.building):
        cursor.status = run.status
        cursor.attempt = run.attempt
        cursor.building = building
        status_event: ServerSentEvent | None = json_event("status", status_payload(run))
    else:
        status_event = None
    if series:
        cursor.sweep_quiet = False
        for key, s in series.items():
            cursor.last_steps[key] = s["step"][-1]
        events.append(json_event("metrics", {"series": series}, id=event_id(cursor)))
    # The log is read only now: the metrics event's id carries the log offset from before this
    # poll's text, so a client resuming from it gets that text again (tests/test_sse_resume.py).
    log_began = time.perf_counter()
    text = _read_log(cursor)
    log_read = time.perf_counter()
    if text:
        # offset: where this text ends in output.log, for a client that reconnects.
        events.append(
            json_event("log", {"text": text, "offset": cursor.log_offset}, id=event_id(cursor))
        )
    if status_event is not None:
        events.append(status_event)  # after the data, so "finished" comes last
    ended = time.perf_counter()
    STREAM_POLL_SECONDS.labels("read").observe((read - began) + (log_read - log_began))
    STREAM_POLL_SECONDS.labels("encode").observe((log_began - read) + (ended - log_read))
    done = sweep_done and cursor.sweep_after_finish and cursor.sweep_quiet and not text
    return events, done


def _read_window(session: Session, cursor: StreamCursor) -> tuple[dict[str, Any], bool]:
    """New points of the keys in the cursor's current window, and whether that window ended
    a sweep over all keys (the cursor then starts the next sweep from the first key)."""
    start, inclusive = cursor.window_start or (None, False)
    cursor.behind = False
    keys = key_window(
        session, run_id=cursor.run_id, start=start, inclusive=inclusive, max_keys=KEY_WINDOW
    )
    if not keys:
        cursor.window_start = None
        return {}, True
    after = {k: cursor.last_steps[k] for k in keys if k in cursor.last_steps}
    series = read_new_points(session, run_id=cursor.run_id, after=after, keys=(keys[0], keys[-1]))
    points = sum(len(s["step"]) for s in series.values())
    if points >= NEW_POINTS_LIMIT:
        cursor.window_start = (max(series), True)  # the rest of that key, and on
        cursor.behind = True
        return series, False
    if len(keys) < KEY_WINDOW:
        cursor.window_start = None
        return series, True
    cursor.window_start = (keys[-1], False)
    return series, False


def _read_log(cursor: StreamCursor) -> str:
    chunk = log_source(cursor.run_id).read(cursor.log_offset, MAX_LOG_CHUNK)
    cursor.log_offset += len(chunk)
    return chunk.decode("utf-8", "replace")


def event_id(cursor: StreamCursor) -> str:
    """The SSE id of an event: the client's position once it has this event (each key's last
    step, the log offset). A client that reconnects sends it back as Last-Event-ID (browsers'
    EventSource do so by themselves) and gets exactly what it missed, nothing twice."""
    position = {"s": cursor.last_steps, "l": cursor.log_offset}
    raw = json.dumps(position, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_event_id(raw: str) -> tuple[dict[str, int], int]:
    """Last-Event-ID back into (last step per key, log offset); 422 when it is not ours."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        steps, offset = decoded["s"], decoded["l"]
        valid = (
            isinstance(steps, dict)
            and all(_is_int(v) and isinstance(k, str) for k, v in steps.items())
            and _is_int(offset)
            and offset >= 0
        )
    except (ValueError, TypeError, KeyError, binascii.Error):
        valid = False
    if not valid:
        raise Invalid.at(
            ["header", "last-event-id"],
            "not an event id of this stream; reconnect without Last-Event-ID",
            raw[:200],
        )
    return steps, offset


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_after(raw: str | None) -> dict[str, int]:
    """The `after` query parameter: a JSON object of metric key -> last step already held."""
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in parsed.items()
    ):
        raise Invalid.at(
            ["query", "after"],
            'must be a JSON object of metric key to step, e.g. {"train/loss": 120}',
            raw,
        )
    return parsed


# Open streams per user (in this server process), for the per-user stream limit.
_OPEN_STREAMS: dict[int, int] = {}


@contextmanager
def stream_slot(user_id: int, limit: int) -> Iterator[None]:
    """One of the user's `limit` open streams (in this server process), held while the stream
    is open; 429 naming the limit when they are all taken. A request-scoped dependency holds
    it (FastAPI closes that after the stream's response ends)."""
    if _OPEN_STREAMS.get(user_id, 0) >= limit:
        raise TooMany(
            f"too many open event streams: at most {limit} per user "
            "(TORCHYARD_SSE_MAX_STREAMS_PER_USER); close another run page or stream first",
            retry_after=5,
        )
    _OPEN_STREAMS[user_id] = _OPEN_STREAMS.get(user_id, 0) + 1
    EVENT_STREAMS.inc()
    try:
        yield
    finally:
        EVENT_STREAMS.dec()
        left = _OPEN_STREAMS.get(user_id, 1) - 1
        if left > 0:
            _OPEN_STREAMS[user_id] = left
        else:
            _OPEN_STREAMS.pop(user_id, None)


async def in_pool(user_id: int | None, func: Callable[..., Any], *args: Any) -> Any:
    """`func` in the shared poll threads, at the user's fair turn (app/runs/streams/poll_pool.py);
    the wait for the thread is counted in the `wait` part of the poll histogram."""
    result, waited = await run_polled(user_id, func, *args)
    STREAM_POLL_SECONDS.labels("wait").observe(waited)
    return result


async def stream(
    run_id: int,
    interval: float,
    *,
    after: dict[str, int] | None = None,
    log_offset: int = 0,
    refusal: Callable[[], str | None] | None = None,
    recheck_seconds: float = 5.0,
    user_id: int | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """Everything new since the client's position (by default: every point and the whole log,
    then what follows). ``refusal`` is asked every ``recheck_seconds`` whether the client's
    credentials still hold: a stream outlives its request, and a revoked or expired token
    must not keep receiving a run's data; the stream then ends with an ``error`` event.
    ``user_id``: whose stream it is, for the per-user poll limiter. The stream also ends when
    the server is stopping (app/ops/shutdown.py): the client reconnects with the last event's
    id to the restarted server, and the stopping one is not held up by a long run."""
    cursor = StreamCursor(run_id=run_id, last_steps=dict(after or {}), log_offset=log_offset)
    next_check = time.monotonic() + recheck_seconds
    last_sent = time.monotonic()
    while not shutdown.requested():
        if refusal is not None and time.monotonic() >= next_check:
            try:
                reason = await in_pool(user_id, refusal)
            except DBAPIError as e:
                if not database_away(e):
                    raise
                reason = None  # checked again at the next recheck
            if reason is not None:
                yield ServerSentEvent(event="error", data={"detail": reason})
                return
            next_check = time.monotonic() + recheck_seconds
        try:
            events, done = await in_pool(user_id, poll, cursor)
        except DBAPIError as e:
            if not database_away(e):
                raise
            # The database is away for a moment (a cut connection, a restart): poll again
            # on a fresh connection. The sweep starts over, so points that poll read and
            # never sent are read again (last_steps moved only for what was sent).
            cursor.window_start = None
            cursor.behind = False  # the poll interval before the next try
            events, done = [], False
        sent = time.perf_counter()
        for event in events:
            yield event
        if events:
            # From the first event handed over to the last one taken back: FastAPI's framing
            # and the write to the client's socket (it waits while the client reads slowly).
            STREAM_POLL_SECONDS.labels("send").observe(time.perf_counter() - sent)
        if done:
            return
        if events:
            last_sent = time.monotonic()
        elif time.monotonic() - last_sent >= PING_SECONDS:
            yield json_event("ping", {})
            last_sent = time.monotonic()
        else:
            yield ServerSentEvent(comment="keep-alive")
        await anyio.sleep(0 if cursor.behind else interval)  # 0: others' turns first
    # Stopping: reconnect soon (to the restarted server), from the last event's id.
    yield ServerSentEvent(comment="server stopping", retry=RECONNECT_MS)
