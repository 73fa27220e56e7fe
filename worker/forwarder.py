"""Moves what the job appended to metrics.jsonl into the database, in batches.

The job never talks to the database; this reads complete lines from the last committed offset
(kept on the run row, so a restarted worker resumes instead of replaying), bulk-inserts the
points and records checkpoints, and advances the offset in the same transaction. Scalars the
job wrote with TensorBoard's SummaryWriter anywhere under the run directory move with the same
batch (worker.tensorboard_events).

It also ships output.log: new bytes go to ``run_log_chunks`` with ``runs.log_offset`` advanced
in the same transaction, so the API serves the log without the worker's disk. While the job
runs only whole lines go (a line still being written waits); the final drain (``final=True``)
sends the rest. A call moves at most LOG_SHIP_BYTES, and the small chunks of a quiet log are
merged once they add up (``_compact_log``), so a long run is a modest number of rows. With an
artifact store configured, checkpoints go there too (worker.artifacts).
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from app.metrics.ingest import Step, ingest_steps
from app.runs.models import Checkpoint, Run, RunLogChunk
from torchyard.contract import LOG_FILE
from worker import artifacts
from worker.tensorboard_events import forward_events

log = logging.getLogger(__name__)

MAX_CHUNK_BYTES = 16 * 1024 * 1024
# The most of output.log one call ships; a longer backlog goes over the next calls.
LOG_SHIP_BYTES = 1024 * 1024
# Trailing log chunks smaller than this are merged once they add up to it, or once there are
# LOG_MAX_SMALL_CHUNKS of them (a log that trickles a line per forwarding interval).
LOG_CHUNK_BYTES = 64 * 1024
LOG_MAX_SMALL_CHUNKS = 64


def read_complete_lines(path: Path, offset: int) -> tuple[bytes, int]:
    """The complete lines after `offset` as one chunk ending in a newline (b"" if none), and
    the offset after the last of them. A last line without its newline is still being
    written (the job appends a line in pieces, the newline last): it is not read yet."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(MAX_CHUNK_BYTES)
    except FileNotFoundError:
        return b"", offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return b"", offset
    return chunk[: end + 1], offset + end + 1


def forward(session: Session, *, run_id: int, metrics_path: Path, final: bool = False) -> int:
    """One batch: returns the number of metrics lines and TensorBoard event records moved, plus
    the log chunks written and checkpoint uploads recorded (and, when ``final``, still in
    flight); 0 when nothing under the run directory has anything new.

    ``final``: the job has ended, so the log's last line goes even without its newline, and
    the answer stays above 0 until every checkpoint is in the artifact store (the drain
    waits for uploads between batches, outside any transaction).
    """
    run = session.get(Run, run_id)
    if run is None:
        return 0
    run_dir = metrics_path.parent
    moved = _forward_lines(session, run=run, metrics_path=metrics_path)
    moved += forward_events(session, run_id=run_id, run_dir=run_dir)
    moved += ship_log(session, run=run, log_path=run_dir / LOG_FILE, final=final)
    return moved + artifacts.sync(session, run_id=run_id, run_dir=run_dir, final=final)


def ship_log(session: Session, *, run: Run, log_path: Path, final: bool) -> int:
    """Copy the next bytes of output.log after ``run.log_offset`` into one chunk; 1 if it did."""
    offset = run.log_offset
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            data = f.read(LOG_SHIP_BYTES)
    except FileNotFoundError:
        return 0
    if not final:
        cut = data.rfind(b"\n") + 1
        if cut:
            data = data[:cut]
        elif len(data) < LOG_SHIP_BYTES:  # part of a line; a whole window of one line goes
            return 0
    if not data:
        return 0
    session.execute(insert(RunLogChunk).values(run_id=run.id, offset=offset, data=data))
    run.log_offset = offset + len(data)
    session.flush()
    _compact_log(session, run_id=run.id, end=run.log_offset)
    return 1


def _compact_log(session: Session, *, run_id: int, end: int) -> None:
    """Merge the trailing chunks smaller than LOG_CHUNK_BYTES into one when they add up to it
    or are LOG_MAX_SMALL_CHUNKS many. Sizes come from the offsets (a chunk ends where the next
    begins, the last at ``end``), so only the index is read to decide."""
    offsets = session.scalars(
        select(RunLogChunk.offset)
        .where(RunLogChunk.run_id == run_id)
        .order_by(RunLogChunk.offset.desc())
        .limit(LOG_MAX_SMALL_CHUNKS)
    ).all()
    small: list[int] = []
    for start in offsets:
        chunk_end = small[-1] if small else end
        if chunk_end - start >= LOG_CHUNK_BYTES:
            break
        small.append(start)
    if len(small) < 2 or (end - small[-1] < LOG_CHUNK_BYTES and len(small) < LOG_MAX_SMALL_CHUNKS):
        return
    first = small[-1]
    in_tail = (RunLogChunk.run_id == run_id, RunLogChunk.offset >= first)
    pieces = session.scalars(select(RunLogChunk.data).where(*in_tail).order_by(RunLogChunk.offset))
    merged = b"".join(bytes(p) for p in pieces)
    session.execute(
        delete(RunLogChunk).where(RunLogChunk.run_id == run_id, RunLogChunk.offset > first)
    )
    session.execute(
        update(RunLogChunk)
        .where(RunLogChunk.run_id == run_id, RunLogChunk.offset == first)
        .values(data=merged)
    )


def _non_finite(_constant: str) -> None:
    return None


def _parse_line(raw: bytes) -> Any:
    """One spool line as JSON; raises ValueError if malformed. NaN and Infinity, which the job
    never writes (it writes null) but a hand-written line may, become None (stored as NULL):
    orjson refuses them, so such a line goes through the standard library's parser."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw, parse_constant=_non_finite)


def parse_spool(chunk: bytes, *, run_id: int) -> tuple[list[Step], list[dict[str, Any]]]:
    """The metrics lines (as (step, wall_time, values)) and checkpoint lines of a chunk of
    complete lines; other record types are ignored, a malformed line is skipped (warned).

    Fast path, the whole chunk at once: the lines joined into one JSON array for one orjson
    call, the metrics picked out by one comprehension. Parsing line by line with json.loads
    was the largest share of the forwarder's time (bench/ingest.py). Any line the fast path
    cannot take (malformed, NaN, not an object, values not an object) sends the chunk through
    the careful path, line by line, which skips only that line.
    """
    steps: list[Step] = []
    try:
        records = orjson.loads(b"[" + chunk[:-1].replace(b"\n", b",") + b"]")
        steps = [
            (int(r["step"]), float(r["time"]), r["values"])
            for r in records
            if r.get("type") == "metrics"
        ]
        if not steps or set(map(type, map(itemgetter(2), steps))) == {dict}:
            if len(steps) == len(records):
                return steps, []
            return steps, [r for r in records if r.get("type") == "checkpoint"]
    except (ValueError, TypeError, KeyError, AttributeError):
        pass
    steps.clear()
    checkpoints: list[dict[str, Any]] = []
    for raw in chunk.splitlines():
        try:
            record = _parse_line(raw)
            kind = record.get("type")
            if kind == "metrics":
                values = record["values"]
                if not isinstance(values, dict):
                    raise TypeError("values is not an object")
                steps.append((int(record["step"]), float(record["time"]), values))
            elif kind == "checkpoint":
                checkpoints.append(record)
        except (ValueError, TypeError, KeyError, AttributeError):
            log.warning("run %s: skipping a malformed metrics line: %r", run_id, raw[:200])
    return steps, checkpoints


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a chunk's objects are built: a full chunk is ~140k
    records and ~500k row tuples, none of them in a cycle (freed by reference counting), and
    the collector's passes over them, triggered by the allocations themselves, took a third
    of the forwarder's time (bench/ingest.py: 3.0 -> 2.0 s of CPU for 1M points). Process-wide
    for the moment it lasts; another thread's garbage is collected once it is re-enabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _forward_lines(session: Session, *, run: Run, metrics_path: Path) -> int:
    """The next complete lines of the spool: their points, checkpoints and the new offset, in
    the caller's transaction; returns the number of lines."""
    chunk, new_offset = read_complete_lines(metrics_path, run.metrics_offset)
    if not chunk:
        return 0
    with _gc_paused():
        steps, checkpoints = parse_spool(chunk, run_id=run.id)
        if checkpoints:
            _record_checkpoints(session, run_id=run.id, records=checkpoints)
        if steps:
            ingest_steps(session, run_id=run.id, steps=steps)
    run.metrics_offset = new_offset
    session.flush()
    return chunk.count(b"\n")


def _record_checkpoints(session: Session, *, run_id: int, records: list[dict[str, Any]]) -> None:
    """Checkpoint lines become Checkpoint rows, once per name (a replayed spool adds none)."""
    known = set(session.scalars(select(Checkpoint.name).where(Checkpoint.run_id == run_id)))
    for record in records:
        if record["name"] in known:
            continue
        known.add(record["name"])
        session.add(
            Checkpoint(
                run_id=run_id,
                name=record["name"],
                epoch=int(record["epoch"]),
                step=int(record["step"]),
                size_bytes=int(record["size_bytes"]),
                path=record["path"],
            )
        )
