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

import json
import logging
from pathlib import Path

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from app.metrics.service import ingest_points
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


def read_complete_lines(path: Path, offset: int) -> tuple[list[bytes], int]:
    """Complete lines after `offset`, and the offset after the last of them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(MAX_CHUNK_BYTES)
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    return chunk[: end + 1].splitlines(), offset + end + 1


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


def _forward_lines(session: Session, *, run: Run, metrics_path: Path) -> int:
    run_id = run.id
    lines, new_offset = read_complete_lines(metrics_path, run.metrics_offset)
    if not lines:
        return 0
    points: list[tuple[str, int, float | None, float]] = []
    known = set(session.scalars(select(Checkpoint.name).where(Checkpoint.run_id == run_id)))
    for raw in lines:
        try:
            record = json.loads(raw)
        except ValueError:
            log.warning("run %s: skipping a malformed metrics line: %r", run_id, raw[:200])
            continue
        kind = record.get("type")
        if kind == "metrics":
            step, wall = int(record["step"]), float(record["time"])
            points.extend((k, step, v, wall) for k, v in record["values"].items())
        elif kind == "checkpoint" and record["name"] not in known:
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
    if points:
        ingest_points(session, run_id=run_id, points=points)
    run.metrics_offset = new_offset
    session.flush()
    return len(lines)
