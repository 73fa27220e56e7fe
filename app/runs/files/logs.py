"""Reading a run's output.log: all of it, or one rank's lines, from an offset or as a tail.

The bytes come from a log source: the file itself when the run directory is on this
machine's disk (embedded mode, or a data dir shared over NFS), else the copy the worker
shipped to the database in ``run_log_chunks`` (app.runs.files.log_store). Chunks tile the file, so
both give the same bytes at the same offsets, and everything below works on either.

Under torchrun every line of rank N starts with ``[rankN]: `` (worker.launcher); lines without
a prefix come from torchrun itself. A single-process run's lines are all rank 0's, prefixed or
not. Offsets are byte positions in the whole file, filtered or not.

A multi-node run has one log per node (``node``; app.runs.files.log_store): node k's torchrun writes
global ranks k * nproc .. k * nproc + nproc - 1 (the static rendezvous: worker.launcher), so a
rank names its node, and each node's offsets are its own file's. Node 0's is the run's log
(the one the event stream follows); ``choose_node`` says which a request reads.

With a rank, only whole lines are read: a line belongs to the read when it starts at or after
``offset`` and ends (with its newline) before the end of the file, and the returned end offset
is the end of the last whole line, so a client that continues from it (the SSE stream's
``log_offset``) starts at a line boundary. ``tail`` then keeps the last ``tail`` bytes of the
rank's lines in that range. The log is read in blocks, never whole: forwards from the offset,
or backwards from the end for a tail.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.errors import Invalid
from app.runs.files.job_files import FileRefused, job_file_size, open_job_file
from app.runs.files.log_store import MAX_OFFSET, ChunkLogSource
from app.runs.service import log_path
from torchyard.contract import rank_prefix

BLOCK = 64 * 1024


class LogSource(Protocol):
    """A run's log as bytes: ``size()`` is where it ends now; ``read(offset, n)`` gives up to
    ``n`` bytes from ``offset`` (fewer only at the end)."""

    def size(self) -> int: ...

    def read(self, offset: int, n: int) -> bytes: ...


class FileLogSource:
    """The file on this machine's disk, read only while it is a regular file (never through a
    link, never blocking on a FIFO: app.runs.files.job_files), from the descriptor that was
    checked."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def size(self) -> int:
        return job_file_size(self.path) or 0

    def read(self, offset: int, n: int) -> bytes:
        if offset >= MAX_OFFSET:
            return b""
        try:
            with open_job_file(self.path) as f:
                f.seek(offset)
                return f.read(n)
        except (FileNotFoundError, FileRefused):
            return b""


def log_source(run_id: int, node: int = 0) -> LogSource:
    """The file when this machine has the run directory, else the shipped chunks; node k > 0's
    log of a multi-node run always from its chunks (its file is on its own host)."""
    if node:
        return ChunkLogSource(run_id, node)
    path = log_path(run_id)
    return FileLogSource(path) if job_file_size(path) is not None else ChunkLogSource(run_id)


def choose_node(*, nodes: int, nproc: int, node: int | None, rank: int | None) -> int:
    """The node whose log a read of ``node`` and/or global ``rank`` is from: the one asked, or
    the rank's (node = rank // nproc), else node 0. Raises Invalid for a node or rank the run
    does not have, or a rank that runs on another node than the one asked."""
    world = nodes * nproc
    if rank is not None and rank >= world:
        raise Invalid.at(
            ["query", "rank"],
            f"the run has {world} process(es): rank must be below {world}",
            rank,
            kind="less_than",
        )
    if node is not None and node >= nodes:
        raise Invalid.at(
            ["query", "node"],
            f"the run has {nodes} node(s): node must be below {nodes}",
            node,
            kind="less_than",
        )
    if rank is None:
        return node or 0
    if node is not None and rank // nproc != node:
        raise Invalid.at(
            ["query", "rank"], f"rank {rank} runs on node {rank // nproc}, not node {node}", rank
        )
    return rank // nproc


def _as_source(log: LogSource | Path) -> LogSource:
    return FileLogSource(log) if isinstance(log, Path) else log


@dataclass(frozen=True)
class LogSlice:
    """``end``: the byte offset where what was read ends. ``body`` yields the bytes."""

    body: Iterator[bytes]
    end: int


_RANK_PREFIX = re.compile(rb"^\[rank\d+\]: ")


def collapse_carriage_returns(data: bytes) -> bytes:
    """Each line as a terminal would show it last: a progress bar (tqdm, rich) rewrites its
    line with ``\r`` hundreds of times (under torchrun the job writes it once: see
    torchyard.runtime.output), and only its
    final state is worth reading. A rank's prefix stays; a line still being written keeps a
    trailing ``\r`` (the page's script does the same, ``ty.collapseCarriageReturns``, so the
    text that comes next replaces it)."""
    if b"\r" not in data:
        return data
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if b"\r" not in line:
            continue
        match = _RANK_PREFIX.match(line)
        prefix = match.group(0) if match else b""
        body = line[len(prefix) :]
        shown = [part for part in body.split(b"\r") if part]
        lines[i] = prefix + (shown[-1] if shown else b"") + (b"\r" if body.endswith(b"\r") else b"")
    return b"\n".join(lines)


def _single(data: bytes) -> Iterator[bytes]:
    if data:
        yield data


def read_all(log: LogSource | Path, *, offset: int, tail: int | None) -> LogSlice:
    """Everything from ``offset`` to the end (or the last ``tail`` bytes of that)."""
    source = _as_source(log)
    size = source.size()
    start = max(offset, size - tail) if tail is not None else offset
    data = source.read(start, size - start) if start < size else b""
    return LogSlice(_single(data), size)


def read_rank(log: LogSource | Path, *, rank: int, offset: int, tail: int | None) -> LogSlice:
    """The whole lines of rank ``rank`` (by their prefix) between ``offset`` and the end."""
    source = _as_source(log)
    prefix = rank_prefix(rank).encode()
    start, end = _line_range(source, offset)
    if tail is None:
        return LogSlice(_forward(source, prefix, start, end), end)
    return LogSlice(_single(_backward(source, prefix, start, end, tail)), end)


def _line_range(source: LogSource, offset: int) -> tuple[int, int]:
    """(first line start at or after ``offset``, end of the last whole line)."""
    size = source.size()
    start = min(offset, size)
    if start > 0 and source.read(start - 1, 1) != b"\n":
        # mid-line: the line belongs to a read from before offset
        pos = start
        while True:
            block = source.read(pos, min(BLOCK, size - pos)) if pos < size else b""
            if not block:
                return size, size
            nl = block.find(b"\n")
            if nl >= 0:
                start = pos + nl + 1
                break
            pos += len(block)
    end = size
    while end > start:
        block_start = max(start, end - BLOCK)
        block = source.read(block_start, end - block_start)
        nl = block.rfind(b"\n")
        if nl >= 0:
            return start, block_start + nl + 1
        end = block_start
    return start, start


def _forward(source: LogSource, prefix: bytes, start: int, end: int) -> Iterator[bytes]:
    """The matching lines in [start, end), in batches of about BLOCK bytes."""
    batch: list[bytes] = []
    size = 0
    pos = start
    carry = b""  # a line's first bytes, too few to tell whether it starts with the prefix
    at_line_start, keep = True, False
    while pos < end:
        block = source.read(pos, min(BLOCK, end - pos))
        if not block:
            break
        pos += len(block)
        data, carry = carry + block, b""
        i = 0
        while i < len(data):
            nl = data.find(b"\n", i)
            j = len(data) if nl < 0 else nl + 1
            piece = data[i:j]  # a whole line, or a piece of one longer than the block
            if at_line_start:
                if nl < 0 and len(piece) < len(prefix) and pos < end:
                    carry = piece
                    break
                keep = piece.startswith(prefix)
            at_line_start = nl >= 0
            if keep:
                batch.append(piece)
                size += len(piece)
            i = j
        if size >= BLOCK:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


def _backward(source: LogSource, prefix: bytes, start: int, end: int, tail: int) -> bytes:
    """The last ``tail`` bytes of the matching lines in [start, end), reading from the end."""
    kept: list[bytes] = []
    kept_size = 0
    carry = b""  # the end of a line that began before the block read last, with its newline
    pos = end
    while pos > start and kept_size < tail:
        block_start = max(start, pos - BLOCK)
        parts = (source.read(block_start, pos - block_start) + carry).split(b"\n")
        pos = block_start
        # parts[-1] is b"" (the range ends with a newline); parts[0] is a whole line only
        # when the block began at the range's start.
        if pos > start:
            carry, complete = parts[0] + b"\n", parts[1:-1]
        else:
            carry, complete = b"", parts[:-1]
        for line in reversed(complete):
            if line.startswith(prefix):
                kept.append(line + b"\n")
                kept_size += len(line) + 1
                if kept_size >= tail:
                    break
    data = b"".join(reversed(kept))
    return data[-tail:]
