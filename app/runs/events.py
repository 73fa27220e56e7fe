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

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi.sse import ServerSentEvent

from app.db import session_scope
from app.errors import validation_error
from app.metrics.service import read_new_points
from app.runs.models import Run, RunStatus
from app.runs.service import log_path

MAX_LOG_CHUNK = 256 * 1024


@dataclass
class StreamCursor:
    run_id: int
    last_steps: dict[str, int] = field(default_factory=dict)
    log_offset: int = 0
    status: str | None = None


def status_payload(run: Run) -> dict[str, Any]:
    return {
        "status": run.status,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "exit_code": run.exit_code,
        "error": run.error,
    }


def poll(cursor: StreamCursor) -> tuple[list[ServerSentEvent], bool]:
    """One round: the events to send, and whether the stream is complete."""
    events: list[ServerSentEvent] = []
    with session_scope() as session:
        run = session.get(Run, cursor.run_id)
        if run is None:
            return [ServerSentEvent(event="status", data={"status": "deleted"})], True
        finished = RunStatus(run.status).finished
        series = read_new_points(session, run_id=cursor.run_id, after=cursor.last_steps)
        if run.status != cursor.status:
            cursor.status = run.status
            status_event = ServerSentEvent(event="status", data=status_payload(run))
        else:
            status_event = None
    series = {k: s for k, s in series.items() if s["step"]}
    if series:
        for key, s in series.items():
            cursor.last_steps[key] = s["step"][-1]
        events.append(ServerSentEvent(event="metrics", data={"series": series}))
    text = _read_log(cursor)
    if text:
        # offset: where this text ends in output.log, for a client that reconnects.
        events.append(
            ServerSentEvent(event="log", data={"text": text, "offset": cursor.log_offset})
        )
    if status_event is not None:
        events.append(status_event)  # after the data, so "finished" comes last
    return events, finished and not series and not text


def _read_log(cursor: StreamCursor) -> str:
    try:
        with open(log_path(cursor.run_id), "rb") as f:
            f.seek(cursor.log_offset)
            chunk = f.read(MAX_LOG_CHUNK)
    except FileNotFoundError:
        return ""
    cursor.log_offset += len(chunk)
    return chunk.decode("utf-8", "replace")


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


async def stream(
    run_id: int, interval: float, *, after: dict[str, int] | None = None, log_offset: int = 0
) -> AsyncIterator[ServerSentEvent]:
    """Everything new since the client's position (by default: every point and the whole log,
    then what follows)."""
    cursor = StreamCursor(run_id=run_id, last_steps=dict(after or {}), log_offset=log_offset)
    while True:
        events, done = await anyio.to_thread.run_sync(poll, cursor)
        for event in events:
            yield event
        if done:
            return
        if not events:
            yield ServerSentEvent(comment="keep-alive")
        await anyio.sleep(interval)
