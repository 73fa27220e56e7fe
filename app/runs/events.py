"""The live stream of one run: new metric points, status changes and log lines, as SSE.

A client that already holds part of the run (the run page fetches the downsampled history and
the log's tail first) starts the stream from there: `after` gives the last step it has per
key and `log_offset` the log position; by default the stream starts from nothing.

Each poll reads what is new since the last one (points past each key's last step, log bytes
past the last offset, the status when it changed) in a short session of its own, so a viewer
holds no connection while it waits. The stream ends after the run has finished and the last
points and log lines went out.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.lowlevel import RunVar
from fastapi.sse import ServerSentEvent
from sqlalchemy import bindparam, select

from app.db import session_scope
from app.errors import validation_error
from app.metrics.service import read_new_points
from app.runs.logs import log_source
from app.runs.models import Run, RunStatus

MAX_LOG_CHUNK = 256 * 1024


@dataclass
class StreamCursor:
    run_id: int
    last_steps: dict[str, int] = field(default_factory=dict)
    log_offset: int = 0
    status: str | None = None


def status_payload(run: Any) -> dict[str, Any]:
    """The `status` event's data, from a Run (or a row with its columns)."""
    return {
        "status": run.status,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "exit_code": run.exit_code,
        "error": run.error,
    }


_STATUS_COLUMNS = select(
    Run.status, Run.started_at, Run.finished_at, Run.exit_code, Run.error
).where(Run.id == bindparam("run_id"))


def json_event(event: str, data: Any, id: str | None = None) -> ServerSentEvent:
    """An event whose data is encoded here, in the polling thread: FastAPI would otherwise
    run each payload through jsonable_encoder on the event loop, which was a quarter of the
    server's time with 20 viewers on fast runs (bench/load.py). Non-finite values are already
    None (stored as NULL), so this is plain JSON."""
    raw = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return ServerSentEvent(event=event, raw_data=raw, id=id)


def poll(cursor: StreamCursor) -> tuple[list[ServerSentEvent], bool]:
    """One round: the events to send, and whether the stream is complete."""
    events: list[ServerSentEvent] = []
    with session_scope() as session:
        run = session.execute(_STATUS_COLUMNS, {"run_id": cursor.run_id}).one_or_none()
        if run is None:
            return [json_event("status", {"status": "deleted"})], True
        finished = RunStatus(run.status).finished
        series = read_new_points(session, run_id=cursor.run_id, after=cursor.last_steps)
    if run.status != cursor.status:
        cursor.status = run.status
        status_event: ServerSentEvent | None = json_event("status", status_payload(run))
    else:
        status_event = None
    if series:
        for key, s in series.items():
            cursor.last_steps[key] = s["step"][-1]
        events.append(json_event("metrics", {"series": series}, id=event_id(cursor)))
    text = _read_log(cursor)
    if text:
        # offset: where this text ends in output.log, for a client that reconnects.
        events.append(
            json_event("log", {"text": text, "offset": cursor.log_offset}, id=event_id(cursor))
        )
    if status_event is not None:
        events.append(status_event)  # after the data, so "finished" comes last
    return events, finished and not series and not text


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
        raise validation_error(
            [
                {
                    "type": "value_error",
                    "loc": ["header", "last-event-id"],
                    "msg": "not an event id of this stream; reconnect without Last-Event-ID",
                    "input": raw[:200],
                }
            ]
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
        raise validation_error(
            [
                {
                    "type": "value_error",
                    "loc": ["query", "after"],
                    "msg": 'must be a JSON object of metric key to step, e.g. {"train/loss": 120}',
                    "input": raw,
                }
            ]
        )
    return parsed


# The polls of all streams share this many threads, so at most this many database connections:
# 20 viewers polling at once otherwise hold most of the pool, and a request that then waits for
# a connection stalls everything queued behind it (bench/load.py, docs/performance.md).
POLL_THREADS = 4
_POLL_LIMITER: RunVar[anyio.CapacityLimiter] = RunVar("torchyard_sse_poll_limiter")


def _poll_limiter() -> anyio.CapacityLimiter:
    """One limiter per event loop (a limiter belongs to the loop it was made in)."""
    try:
        return _POLL_LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(POLL_THREADS)
        _POLL_LIMITER.set(limiter)
        return limiter


async def stream(
    run_id: int,
    interval: float,
    *,
    after: dict[str, int] | None = None,
    log_offset: int = 0,
    refusal: Callable[[], str | None] | None = None,
    recheck_seconds: float = 5.0,
) -> AsyncIterator[ServerSentEvent]:
    """Everything new since the client's position (by default: every point and the whole log,
    then what follows). ``refusal`` is asked every ``recheck_seconds`` whether the client's
    credentials still hold: a stream outlives its request, and a revoked or expired token
    must not keep receiving a run's data; the stream then ends with an ``error`` event."""
    cursor = StreamCursor(run_id=run_id, last_steps=dict(after or {}), log_offset=log_offset)
    next_check = time.monotonic() + recheck_seconds
    while True:
        if refusal is not None and time.monotonic() >= next_check:
            reason = await anyio.to_thread.run_sync(refusal, limiter=_poll_limiter())
            if reason is not None:
                yield ServerSentEvent(event="error", data={"detail": reason})
                return
            next_check = time.monotonic() + recheck_seconds
        events, done = await anyio.to_thread.run_sync(poll, cursor, limiter=_poll_limiter())
        for event in events:
            yield event
        if done:
            return
        if not events:
            yield ServerSentEvent(comment="keep-alive")
        await anyio.sleep(interval)
