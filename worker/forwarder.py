"""Moves what the job appended to metrics.jsonl into the database, in batches.

The job never talks to the database; this reads complete lines from the last committed offset
(kept on the run row, so a restarted worker resumes instead of replaying), bulk-inserts the
points and records checkpoints, and advances the offset in the same transaction. Scalars the
job wrote with TensorBoard's SummaryWriter anywhere under the run directory move with the same
batch (worker.tensorboard_events).

Everything here is read from files the job wrote, through app.runs.job_files (regular files
only, no link followed, never blocking on a FIFO), and every spool line is checked
(worker.spool_lines): a bad line is skipped and counted on the run (app.runs.notices), a line
longer than ``spool_line_max_bytes`` is skipped without being read whole, and the per-run
limits (metric keys, log bytes) are applied here, each said on the run when reached.

The log is stored once. On one box (no artifact store) the API reads output.log itself. With
an artifact store the API is on another host: new bytes go to ``run_log_chunks`` with
``runs.log_offset`` advanced in the same transaction. While the job runs only whole lines go
(a line still being written waits); the final drain (``final=True``) sends the rest. A call
moves at most LOG_SHIP_BYTES, and the small chunks of a quiet log are merged once they add up
(``_compact_log``), so a long run is a modest number of rows. With an artifact store,
checkpoints go there too (worker.artifacts).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from app.metrics.ingest import KeyLimit, ingest_steps
from app.notifications.triggers import metrics_arrived
from app.runs import lifecycle, notices
from app.runs.job_files import FileRefused, cut_job_file, job_file_size, open_job_file
from app.runs.models import Checkpoint, Run, RunLogChunk
from app.settings import get_settings
from torchyard.contract import LOG_FILE
from worker import artifacts, retention, spool_lines
from worker.spool_lines import parse_spool
from worker.tensorboard_events import forward_events

log = logging.getLogger(__name__)

MAX_CHUNK_BYTES = 16 * 1024 * 1024
# The most of output.log one call ships; a longer backlog goes over the next calls.
LOG_SHIP_BYTES = 1024 * 1024
# Trailing log chunks smaller than this are merged once they add up to it, or once there are
# LOG_MAX_SMALL_CHUNKS of them (a log that trickles a line per forwarding interval).
LOG_CHUNK_BYTES = 64 * 1024
LOG_MAX_SMALL_CHUNKS = 64


class SpoolRead(NamedTuple):
    chunk: bytes  # whole lines, each at most the line limit, ending in a newline (or b"")
    offset: int  # where the next read starts
    too_long: int  # lines skipped for their length


def read_complete_lines(path: Path, offset: int, max_line: int = MAX_CHUNK_BYTES) -> SpoolRead:
    """The complete lines after ``offset``, and the offset after the last of them. A last line
    without its newline is still being written (the job appends a line in pieces, the newline
    last): it is not read yet, unless it is already longer than ``max_line``.

    A line longer than ``max_line`` is skipped (counted in ``too_long``) without ever being
    held whole: once it is known too long, the offset moves to the end of what was read, and
    later reads start in the middle of it (the byte before the offset is not a newline) and
    drop everything up to its newline."""
    start = max(0, offset - 1)
    try:
        with open_job_file(path) as f:
            f.seek(start)
            # Room for one line over the limit, so a full window is never one waiting line.
            window = f.read(max(MAX_CHUNK_BYTES, max_line + 1) + offset - start)
    except (FileNotFoundError, FileRefused):
        return SpoolRead(b"", offset, 0)
    data, base = window[offset - start :], offset
    if offset > 0 and window[:1] != b"\n":  # inside a line skipped as too long
        nl = data.find(b"\n")
        if nl < 0:
            return SpoolRead(b"", offset + len(data), 0)
        data, base = data[nl + 1 :], offset + nl + 1
    end = data.rfind(b"\n") + 1
    chunk, too_long = data[:end], 0
    if _may_hold_a_longer_line(chunk, max_line):
        lines = chunk.split(b"\n")[:-1]
        if max(map(len, lines)) > max_line:
            kept = [line for line in lines if len(line) <= max_line]
            too_long = len(lines) - len(kept)
            chunk = b"".join(line + b"\n" for line in kept)
    if len(data) - end > max_line:  # a last line too long already, newline or not
        return SpoolRead(chunk, base + len(data), too_long + 1)
    return SpoolRead(chunk, base + end, too_long)


def _may_hold_a_longer_line(chunk: bytes, max_line: int) -> bool:
    """False when no line of ``chunk`` is longer than ``max_line``, checked in a few dozen
    finds: such a line would cover a whole aligned block of ``max_line // 2 + 1`` bytes, so
    only a block without a newline is worth splitting the chunk for."""
    block = max_line // 2 + 1
    return any(chunk.find(b"\n", i, i + block) < 0 for i in range(0, len(chunk) - block + 1, block))


def forward(
    session: Session,
    *,
    run_id: int,
    metrics_path: Path,
    final: bool = False,
    attempt: int | None = None,
) -> int:
    """One batch: returns the number of metrics lines and TensorBoard event records moved, plus
    the log chunks written and checkpoint uploads recorded (and, when ``final``, still in
    flight); 0 when nothing under the run directory has anything new.

    ``final``: the job has ended, so the log's last line goes even without its newline, and
    the answer stays above 0 until every checkpoint is in the artifact store (the drain
    waits for uploads between batches, outside any transaction).

    ``attempt``: the attempt whose spool this is. Its batch is refused (0) once the run is no
    longer that attempt's (app.runs.lifecycle.holds: requeued by a reaper, finished): a
    stalled worker's late batch never lands in the next attempt's curve. None: the caller
    already holds the run in this transaction (the reaper's salvage).
    """
    if attempt is not None and not lifecycle.holds(session, run_id=run_id, attempt=attempt):
        log.warning(
            "run %s: attempt %s no longer owns the run; its batch is refused", run_id, attempt
        )
        return 0
    run = session.get(Run, run_id)
    if run is None:
        return 0
    settings = get_settings()
    run_dir = metrics_path.parent
    key_limit = KeyLimit(settings.max_metric_keys_per_run)
    moved = _forward_lines(
        session,
        run=run,
        metrics_path=metrics_path,
        key_limit=key_limit,
        max_line=settings.spool_line_max_bytes,
    )
    moved += forward_events(session, run_id=run_id, run_dir=run_dir, key_limit=key_limit)
    notices.add_dropped_points(run, limit=key_limit.max_keys, points=key_limit.dropped_points)
    log_path = run_dir / LOG_FILE
    limit_log(run, log_path=log_path, max_bytes=settings.max_log_bytes)
    if settings.artifact_store:  # the API is elsewhere: it reads the log from the database
        moved += ship_log(session, run=run, log_path=log_path, final=final)
    session.flush()
    return moved + artifacts.sync(session, run_id=run_id, run_dir=run_dir, final=final)


def limit_log(run: Run, *, log_path: Path, max_bytes: int) -> None:
    """Keep the log within ``max_bytes``: the first time it is longer, it is cut there and a
    note ends it (the run says so too); afterwards whatever the job appends is cut off again
    on each call. The job's descriptor appends, so its writes land at the end either way."""
    size = job_file_size(log_path)
    if size is None or size <= max_bytes:
        return
    kept = notices.log_kept(run)
    if kept is None:
        note = (
            f"\ntorchyard: the log reached its limit of {notices.size_text(max_bytes)}; "
            "the rest of this run's output is not kept\n"
        ).encode()
        if cut_job_file(log_path, max_bytes, note):
            notices.log_cut(run, limit=max_bytes, kept=max_bytes + len(note))
    elif size > kept:
        cut_job_file(log_path, kept)


def ship_log(session: Session, *, run: Run, log_path: Path, final: bool) -> int:
    """Copy the next bytes of output.log after ``run.log_offset`` into one chunk; 1 if it did."""
    offset = run.log_offset
    end = notices.log_kept(run)  # bytes past a cut are not the run's log
    try:
        with open_job_file(log_path) as f:
            f.seek(offset)
            data = f.read(
                LOG_SHIP_BYTES if end is None else max(0, min(LOG_SHIP_BYTES, end - offset))
            )
    except (FileNotFoundError, FileRefused):
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


def _forward_lines(
    session: Session, *, run: Run, metrics_path: Path, key_limit: KeyLimit, max_line: int
) -> int:
    """The next complete lines of the spool: their points, checkpoints, the lines skipped
    (counted on the run) and the new offset, in the caller's transaction; returns the number
    of lines."""
    chunk, new_offset, too_long = read_complete_lines(metrics_path, run.metrics_offset, max_line)
    if new_offset == run.metrics_offset:
        return 0
    with _gc_paused():
        parsed = parse_spool(chunk)
        if parsed.checkpoints:
            _record_checkpoints(session, run_id=run.id, records=parsed.checkpoints)
        if parsed.steps:
            ingest_steps(session, run_id=run.id, steps=parsed.steps, key_limit=key_limit)
        if parsed.nulls:  # a NaN/inf value (written as null): its owner may be told
            metrics_arrived(session, run_id=run.id, steps=parsed.steps)
        if parsed.checkpoints:  # after the points: the best is ranked by their values
            retention.apply(session, run=run, run_dir=metrics_path.parent)
    if too_long:
        parsed.skipped[spool_lines.too_long(max_line)] += too_long
    if parsed.skipped:
        log.warning("run %s: spool lines skipped: %s", run.id, dict(parsed.skipped))
        notices.add_skipped(run, parsed.skipped)
    run.metrics_offset = new_offset
    session.flush()
    return max(1, chunk.count(b"\n") + too_long)  # the offset moved: there may be more


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
