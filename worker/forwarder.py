"""Moves what the job appended to metrics.jsonl into the database, in batches.

The job never talks to the database; this reads complete lines from the last committed offset
(kept on the run row, so a restarted worker resumes instead of replaying), bulk-inserts the
points and records checkpoints, and advances the offset in the same transaction. Scalars the
job wrote with TensorBoard's SummaryWriter anywhere under the run directory move with the same
batch (worker.tensorboard_events).

Everything here is read from files the job wrote, through app.runs.files.job_files (regular files
only, no link followed, never blocking on a FIFO), and every spool line is checked
(worker.spool_lines): a bad line is skipped and counted on the run (app.runs.state.notices), a line
longer than ``spool_line_max_bytes`` is skipped without being read whole, and the per-run
limits (metric keys, log bytes) are applied here, each said on the run when reached.

Every row changes through the app module that owns its table, with this batch's session:
points (app.metrics.ingest), the offsets and what was kept out (app.runs.files.ingest_offsets),
checkpoint rows and their retention (app.runs.files.checkpoint_records), the log's copy and its
size limit (app.runs.files.log_store, which ships output.log to the database when the API is on
another host). With an artifact store, checkpoints go there too (worker.artifacts).

A multi-node run's node k > 0 (``node``) forwards only its output.log, always to the database
(the API never has that host's disk): metrics, TensorBoard scalars and checkpoints are global
rank 0's, on node 0, so node k's spool, offsets and checkpoints are never read, and nothing of
its host reaches the artifact store (docs/multi-node.md).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from app.db import Session
from app.metrics.ingest import KeyLimit, ingest_steps
from app.notifications.triggers import metrics_arrived
from app.runs.files import checkpoint_records, ingest_offsets, log_store
from app.runs.files.job_files import FileRefused, open_job_file
from app.runs.query.params import record_reported, record_script
from app.runs.state import lifecycle
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import artifacts, spool_lines
from worker.spool_lines import parse_spool
from worker.tensorboard_events import forward_events

log = logging.getLogger(__name__)

MAX_CHUNK_BYTES = 16 * 1024 * 1024


class SpoolRead(NamedTuple):
    chunk: bytes  # whole lines, each at most the line limit, ending in a newline (or b"")
    offset: int  # where the next read starts
    too_long: int  # lines skipped for their length
    more: bool = False  # the window was full: the spool holds more than this batch


class Moved(int):
    """What ``forward`` moved (an int, as callers count it), and whether the spool held more
    than one batch could take: the watch loop then goes again without its pause."""

    more: bool = False
    # The spool's offset after this batch (its transaction's), when it was looked up: the
    # watch loop tells the job once it is committed (worker.ingest_mark).
    offset: int | None = None


def read_complete_lines(
    path: Path, offset: int, max_line: int = MAX_CHUNK_BYTES, batch: int = MAX_CHUNK_BYTES
) -> SpoolRead:
    """The complete lines after ``offset`` in a window of about ``batch`` bytes, and the offset
    after the last of them. A last line without its newline is still being written (the job
    appends a line in pieces, the newline last): it is not read yet, unless it is already
    longer than ``max_line``.

    A line longer than ``max_line`` is skipped (counted in ``too_long``) without ever being
    held whole: once it is known too long, the offset moves to the end of what was read, and
    later reads start in the middle of it (the byte before the offset is not a newline) and
    drop everything up to its newline."""
    start = max(0, offset - 1)
    try:
        with open_job_file(path) as f:
            f.seek(start)
            # Room for one line over the limit, so a full window is never one waiting line.
            wanted = max(batch, max_line + 1) + offset - start
            window = f.read(wanted)
    except (FileNotFoundError, FileRefused):
        return SpoolRead(b"", offset, 0)
    more = len(window) == wanted
    data, base = window[offset - start :], offset
    if offset > 0 and window[:1] != b"\n":  # inside a line skipped as too long
        nl = data.find(b"\n")
        if nl < 0:
            return SpoolRead(b"", offset + len(data), 0, more)
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
        return SpoolRead(chunk, base + len(data), too_long + 1, more)
    return SpoolRead(chunk, base + end, too_long, more)


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
    node: int = 0,
) -> Moved:
    """One batch: returns the number of metrics lines and TensorBoard event records moved, plus
    the log chunks written and checkpoint uploads recorded (and, when ``final``, still in
    flight); 0 when nothing under the run directory has anything new. Its ``more``: the spool
    held more than this batch.

    A batch reads at most ``forward_batch_bytes`` of the spool: its transaction is short (on
    SQLite it holds the one write lock for ~0.1 s, not the seconds a 16 MiB batch took), so
    another run's batch, a heartbeat or the API's own writes get the lock in between
    (worker.ingest_gate gives the turns).

    ``final``: the job has ended, so the log's last line goes even without its newline, and
    the answer stays above 0 until every checkpoint is in the artifact store (the drain
    waits for uploads between batches, outside any transaction).

    ``attempt``: the attempt whose spool this is. Its batch is refused (0) once the run is no
    longer that attempt's (app.runs.state.lifecycle.holds: requeued by a reaper, finished): a
    stalled worker's late batch never lands in the next attempt's curve. None: the caller
    already holds the run in this transaction (the reaper's salvage).

    ``node``: this host's node of a multi-node run (0: node 0, or a single host); node k > 0
    ships its log and nothing else (the module's docstring says why).
    """
    if attempt is not None and not lifecycle.holds(session, run_id=run_id, attempt=attempt):
        log.warning(
            "run %s: attempt %s no longer owns the run; its batch is refused", run_id, attempt
        )
        return Moved(0)
    if node:
        return _forward_node_log(
            session, run_id=run_id, run_dir=metrics_path.parent, node=node, final=final
        )
    offset = ingest_offsets.metrics_offset(session, run_id=run_id)
    if offset is None:
        return Moved(0)
    settings = get_settings()
    run_dir = metrics_path.parent
    key_limit = KeyLimit(settings.max_metric_keys_per_run)
    lines, more, offset = _forward_lines(
        session,
        run_id=run_id,
        offset=offset,
        metrics_path=metrics_path,
        key_limit=key_limit,
        max_line=settings.spool_line_max_bytes,
        batch=settings.forward_batch_bytes,
    )
    moved = lines + forward_events(session, run_id=run_id, run_dir=run_dir, key_limit=key_limit)
    ingest_offsets.note_dropped_points(
        session, run_id=run_id, limit=key_limit.max_keys, points=key_limit.dropped_points
    )
    log_path = RunPaths(run_dir).log
    log_store.limit(session, run_id=run_id, log_path=log_path, max_bytes=settings.max_log_bytes)
    if settings.artifact_store:  # the API is elsewhere: it reads the log from the database
        moved += log_store.ship(session, run_id=run_id, log_path=log_path, final=final)
    session.flush()
    result = Moved(moved + artifacts.sync(session, run_id=run_id, run_dir=run_dir, final=final))
    result.more = more
    result.offset = offset
    return result


def _forward_node_log(
    session: Session, *, run_id: int, run_dir: Path, node: int, final: bool
) -> Moved:
    """Node k > 0's batch: its output.log, kept within the limit, to its own chunks."""
    log_path = RunPaths(run_dir).log
    max_bytes = get_settings().max_log_bytes
    log_store.limit(session, run_id=run_id, log_path=log_path, max_bytes=max_bytes, node=node)
    moved = log_store.ship(session, run_id=run_id, log_path=log_path, final=final, node=node)
    session.flush()
    return Moved(int(moved))


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
    session: Session,
    *,
    run_id: int,
    offset: int,
    metrics_path: Path,
    key_limit: KeyLimit,
    max_line: int,
    batch: int,
) -> tuple[int, bool, int]:
    """The next complete lines of the spool after ``offset`` (about ``batch`` bytes): their
    points, checkpoints, the lines skipped (counted on the run) and the new offset, in the
    caller's transaction; returns the number of lines, whether the spool holds more and the
    offset after them."""
    chunk, new_offset, too_long, more = read_complete_lines(metrics_path, offset, max_line, batch)
    if new_offset == offset:
        return 0, False, offset
    with _gc_paused():
        parsed = parse_spool(chunk)
        if parsed.checkpoints:
            checkpoint_records.record(session, run_id=run_id, records=parsed.checkpoints)
        if parsed.steps:
            ingest_steps(session, run_id=run_id, steps=parsed.steps, key_limit=key_limit)
        if parsed.params:  # MLflow params logged inside the job (torchyard.mlflow_store)
            record_reported(session, run_id=run_id, values=parsed.params)
        if parsed.config:  # the script's torchyard.init(config=...): the launch's keys win
            differing, _caps = record_script(session, run_id=run_id, values=parsed.config)
            ingest_offsets.note_config_differs(session, run_id=run_id, differing=differing)
        if parsed.non_finite:  # a NaN (null) or +/-inf value: its owner may be told
            metrics_arrived(session, run_id=run_id, steps=parsed.steps)
        if parsed.checkpoints:  # after the points: the best is ranked by their values
            checkpoint_records.apply_retention(session, run_id=run_id, run_dir=metrics_path.parent)
    if too_long:
        parsed.skipped[spool_lines.too_long(max_line)] += too_long
    if parsed.skipped:
        log.warning("run %s: spool lines skipped: %s", run_id, dict(parsed.skipped))
    ingest_offsets.advance_metrics(
        session, run_id=run_id, offset=new_offset, skipped=parsed.skipped
    )
    # The offset moved: there may be more.
    return max(1, chunk.count(b"\n") + too_long), more, new_offset
