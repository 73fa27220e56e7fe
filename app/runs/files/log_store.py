"""The run's log as the database keeps it: ``run_log_chunks`` and ``runs.log_offset``, written
and read here only (a run's deletion removes its chunks: app.runs.deletion), plus the
log-size limit's bookkeeping on the run.

The log is stored once. On one box (no artifact store) the API reads output.log itself
(app.runs.files.logs.FileLogSource). With an artifact store the API is on another host: the worker's
forwarder calls ``ship`` and the next bytes go to ``run_log_chunks`` with ``runs.log_offset``
advanced in the same transaction. While the job runs only whole lines go (a line still being
written waits); the final drain (``final=True``) sends the rest. A call moves at most
SHIP_BYTES, and the small chunks of a quiet log are merged once they add up (``_compact``),
so a long run is a modest number of rows. Chunks tile the file (offset = bytes before it), so
``ChunkLogSource`` gives the same bytes at the same offsets as the file.

``limit`` keeps output.log within ``max_log_bytes``: the cut and the note that ends it are
recorded on the run (app.runs.state.notices), and the shipped copy never goes past the cut.

A multi-node run has one output.log per host. Node 0's is the run's log as above (its size in
``runs.log_offset``, its cut in the run's notices). Node k > 0's worker always ships its file
(the API never has that host's disk) as chunks with ``node = k``, tiled on their own; their
size is where the last chunk ends, and its cut is found in the file itself: the note that ends
a cut log is always the same bytes for a limit, so a node's log never ships past
``max_bytes + len(note)`` (docs/multi-node.md).

Every function that writes takes the caller's session and flushes at most.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from app.db import session_scope
from app.runs.files.job_files import FileRefused, cut_job_file, job_file_size, open_job_file
from app.runs.models import Run, RunLogChunk
from app.runs.state import notices
from app.settings import get_settings

# No log is this long; a client's offset past it reads nothing (instead of overflowing a seek
# or a BIGINT).
MAX_OFFSET = 2**62
# The most of output.log one call ships; a longer backlog goes over the next calls.
SHIP_BYTES = 1024 * 1024
# Trailing log chunks smaller than this are merged once they add up to it, or once there are
# MAX_SMALL_CHUNKS of them (a log that trickles a line per forwarding interval).
CHUNK_BYTES = 64 * 1024
MAX_SMALL_CHUNKS = 64


def _cut_note(max_bytes: int) -> bytes:
    """The line that ends a log cut at ``max_bytes`` (the same bytes every time)."""
    return (
        f"\ntorchyard: the log reached its limit of {notices.size_text(max_bytes)}; "
        "the rest of this run's output is not kept\n"
    ).encode()


def limit(session: Session, *, run_id: int, log_path: Path, max_bytes: int, node: int = 0) -> None:
    """Keep the log within ``max_bytes``: the first time it is longer, it is cut there and a
    note ends it (the run says so too); afterwards whatever the job appends is cut off again
    on each call. The job's descriptor appends, so its writes land at the end either way.
    ``node``: a multi-node run's node whose log this is (0: the run's own, or a single host's)."""
    size = job_file_size(log_path)
    if size is None or size <= max_bytes:
        return
    if node:
        _limit_node_log(log_path, max_bytes, size)
        return
    run = session.get(Run, run_id)
    if run is None:
        return
    kept = notices.log_kept(run)
    if kept is None:
        note = _cut_note(max_bytes)
        if cut_job_file(log_path, max_bytes, note):
            notices.log_cut(run, limit=max_bytes, kept=max_bytes + len(note))
            session.flush()
    elif size > kept:
        cut_job_file(log_path, kept)


def _limit_node_log(log_path: Path, max_bytes: int, size: int) -> None:
    """Node k > 0's cut, told from the file: its note is already at ``max_bytes`` (cut before:
    only what the job appended since goes), or it is cut there now."""
    note = _cut_note(max_bytes)
    try:
        with open_job_file(log_path) as f:
            f.seek(max_bytes)
            cut_before = f.read(len(note)) == note
    except (FileNotFoundError, FileRefused):
        return
    if not cut_before:
        cut_job_file(log_path, max_bytes, note)
    elif size > max_bytes + len(note):
        cut_job_file(log_path, max_bytes + len(note))


def shipped_bytes(session: Session, *, run_id: int, node: int = 0) -> int:
    """How much of the log the database holds (``runs.log_offset``; node k > 0's: where its
    last chunk ends); 0 for no such run."""
    if node:
        last = session.execute(
            select(RunLogChunk.offset, func.length(RunLogChunk.data))
            .where(RunLogChunk.run_id == run_id, RunLogChunk.node == node)
            .order_by(RunLogChunk.offset.desc())
            .limit(1)
        ).first()
        return 0 if last is None else int(last[0]) + int(last[1])
    return int(session.scalar(select(Run.log_offset).where(Run.id == run_id)) or 0)


def ship(session: Session, *, run_id: int, log_path: Path, final: bool, node: int = 0) -> bool:
    """Copy the next bytes of output.log after ``runs.log_offset`` into one chunk; True if it
    did. ``node``: whose output.log this is (a multi-node run's node k ships its own file to
    its own chunks; 0 for a single host)."""
    run = session.get(Run, run_id)
    if run is None:
        return False
    if node:
        offset = shipped_bytes(session, run_id=run_id, node=node)
        max_bytes = get_settings().max_log_bytes
        end: int | None = max_bytes + len(_cut_note(max_bytes))  # a cut node log's end
    else:
        offset = run.log_offset
        end = notices.log_kept(run)  # bytes past a cut are not the run's log
    try:
        with open_job_file(log_path) as f:
            f.seek(offset)
            data = f.read(SHIP_BYTES if end is None else max(0, min(SHIP_BYTES, end - offset)))
    except (FileNotFoundError, FileRefused):
        return False
    if not final:
        cut = data.rfind(b"\n") + 1
        if cut:
            data = data[:cut]
        elif len(data) < SHIP_BYTES:  # part of a line; a whole window of one line goes
            return False
    if not data:
        return False
    session.execute(insert(RunLogChunk).values(run_id=run_id, node=node, offset=offset, data=data))
    if not node:
        run.log_offset = offset + len(data)
    session.flush()
    _compact(session, run_id=run_id, node=node, end=offset + len(data))
    return True


def _compact(session: Session, *, run_id: int, node: int, end: int) -> None:
    """Merge the trailing chunks smaller than CHUNK_BYTES into one when they add up to it or
    are MAX_SMALL_CHUNKS many. Sizes come from the offsets (a chunk ends where the next
    begins, the last at ``end``), so only the index is read to decide."""
    offsets = session.scalars(
        select(RunLogChunk.offset)
        .where(RunLogChunk.run_id == run_id, RunLogChunk.node == node)
        .order_by(RunLogChunk.offset.desc())
        .limit(MAX_SMALL_CHUNKS)
    ).all()
    small: list[int] = []
    for start in offsets:
        chunk_end = small[-1] if small else end
        if chunk_end - start >= CHUNK_BYTES:
            break
        small.append(start)
    if len(small) < 2 or (end - small[-1] < CHUNK_BYTES and len(small) < MAX_SMALL_CHUNKS):
        return
    first = small[-1]
    of_log = (RunLogChunk.run_id == run_id, RunLogChunk.node == node)
    pieces = session.scalars(
        select(RunLogChunk.data)
        .where(*of_log, RunLogChunk.offset >= first)
        .order_by(RunLogChunk.offset)
    )
    merged = b"".join(bytes(p) for p in pieces)
    session.execute(delete(RunLogChunk).where(*of_log, RunLogChunk.offset > first))
    session.execute(
        update(RunLogChunk).where(*of_log, RunLogChunk.offset == first).values(data=merged)
    )


class ChunkLogSource:
    """The log as the worker shipped it: ``runs.log_offset`` bytes in ``run_log_chunks``; a
    app.runs.files.logs.LogSource.

    Each read is one short query of its own (a streamed response outlives the request's
    session) for the chunks that overlap the range; the span it fetched is kept, so reading
    a chunk block by block costs one query, and small chunks are joined on the way out.
    """

    def __init__(self, run_id: int, node: int = 0) -> None:
        self.run_id = run_id
        self.node = node
        self._span_start = 0
        self._span = b""

    def size(self) -> int:
        with session_scope() as session:
            return shipped_bytes(session, run_id=self.run_id, node=self.node)

    def read(self, offset: int, n: int) -> bytes:
        if offset >= MAX_OFFSET:
            return b""
        end = min(offset + n, MAX_OFFSET)
        span_end = self._span_start + len(self._span)
        if not (self._span_start <= offset and end <= span_end):
            self._fetch(offset, end)
        return self._span[offset - self._span_start : end - self._span_start]

    def _fetch(self, offset: int, end: int) -> None:
        chunk = RunLogChunk
        of_log = (chunk.run_id == self.run_id, chunk.node == self.node)
        # The chunk that holds `offset` starts at the greatest chunk offset <= it.
        first = (
            select(func.max(chunk.offset)).where(*of_log, chunk.offset <= offset).scalar_subquery()
        )
        stmt = (
            select(chunk.offset, chunk.data)
            .where(
                *of_log,
                chunk.offset >= func.coalesce(first, 0),
                chunk.offset < end,
            )
            .order_by(chunk.offset)
        )
        with session_scope() as session:
            rows = session.execute(stmt).all()
        if not rows:
            self._span_start, self._span = offset, b""
            return
        self._span_start = int(rows[0][0])
        self._span = b"".join(bytes(data) for _, data in rows)


def drop_first_log_chunks(session: Session, *, run_id: int, count: int) -> int:
    """Up to ``count`` of the run's first log chunks (a deleted run's, a short
    transaction's worth at a time: app.runs.deletion); how many went."""
    first = list(
        session.scalars(
            select(RunLogChunk.offset)
            .where(RunLogChunk.run_id == run_id)
            .order_by(RunLogChunk.offset)
            .limit(count)
        )
    )
    if first:
        session.execute(
            delete(RunLogChunk).where(RunLogChunk.run_id == run_id, RunLogChunk.offset <= first[-1])
        )
    return len(first)
