"""Reading a run's output.log: all of it, or one rank's lines, from an offset or as a tail.

Under torchrun every line of rank N starts with ``[rankN]: `` (worker.launcher); lines without
a prefix come from torchrun itself. A single-process run's lines are all rank 0's, prefixed or
not. Offsets are byte positions in the whole file, filtered or not.

With a rank, only whole lines are read: a line belongs to the read when it starts at or after
``offset`` and ends (with its newline) before the end of the file, and the returned end offset
is the end of the last whole line, so a client that continues from it (the SSE stream's
``log_offset``) starts at a line boundary. ``tail`` then keeps the last ``tail`` bytes of the
rank's lines in that range. The file is read in blocks, never whole: forwards from the offset,
or backwards from the end for a tail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from worker.launcher import rank_prefix

BLOCK = 64 * 1024


def run_nproc(config: Mapping[str, Any]) -> int:
    """How many processes (ranks) the run's config asks for."""
    resources = config.get("resources") or {}
    return max(1, int(resources.get("nproc", 1)))


@dataclass(frozen=True)
class LogSlice:
    """``end``: the byte offset where what was read ends. ``body`` yields the bytes."""

    body: Iterator[bytes]
    end: int


def _single(data: bytes) -> Iterator[bytes]:
    if data:
        yield data


def read_all(path: Path, *, offset: int, tail: int | None) -> LogSlice:
    """Everything from ``offset`` to the end (or the last ``tail`` bytes of that)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(offset, size - tail) if tail is not None else offset)
            data = f.read(max(size - f.tell(), 0))
    except FileNotFoundError:
        return LogSlice(_single(b""), 0)
    return LogSlice(_single(data), size)


def read_rank(path: Path, *, rank: int, offset: int, tail: int | None) -> LogSlice:
    """The whole lines of rank ``rank`` (by their prefix) between ``offset`` and the end."""
    prefix = rank_prefix(rank).encode()
    try:
        with open(path, "rb") as f:
            start, end = _line_range(f, offset)
            if tail is None:
                return LogSlice(_forward(path, prefix, start, end), end)
            return LogSlice(_single(_backward(f, prefix, start, end, tail)), end)
    except FileNotFoundError:
        return LogSlice(_single(b""), 0)


def _line_range(f: BinaryIO, offset: int) -> tuple[int, int]:
    """(first line start at or after ``offset``, end of the last whole line)."""
    size = f.seek(0, os.SEEK_END)
    start = min(offset, size)
    if start > 0:
        f.seek(start - 1)
        if f.read(1) != b"\n":  # mid-line: the line belongs to a read from before offset
            f.seek(start)
            while True:
                block = f.read(BLOCK)
                if not block:
                    return size, size
                nl = block.find(b"\n")
                if nl >= 0:
                    start = f.tell() - len(block) + nl + 1
                    break
    end = size
    while end > start:
        block_start = max(start, end - BLOCK)
        f.seek(block_start)
        block = f.read(end - block_start)
        nl = block.rfind(b"\n")
        if nl >= 0:
            return start, block_start + nl + 1
        end = block_start
    return start, start


def _forward(path: Path, prefix: bytes, start: int, end: int) -> Iterator[bytes]:
    """The matching lines in [start, end), in batches of about BLOCK bytes."""
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        batch: list[bytes] = []
        size = 0
        at_line_start, keep = True, False
        while left > 0:
            piece = f.readline(min(left, BLOCK))  # a line longer than BLOCK comes in pieces
            if not piece:
                break
            left -= len(piece)
            if at_line_start:
                keep = piece.startswith(prefix)
            at_line_start = piece.endswith(b"\n")
            if keep:
                batch.append(piece)
                size += len(piece)
                if size >= BLOCK:
                    yield b"".join(batch)
                    batch, size = [], 0
        if batch:
            yield b"".join(batch)


def _backward(f: BinaryIO, prefix: bytes, start: int, end: int, tail: int) -> bytes:
    """The last ``tail`` bytes of the matching lines in [start, end), reading from the end."""
    kept: list[bytes] = []
    kept_size = 0
    carry = b""  # the end of a line that began before the block read last, with its newline
    pos = end
    while pos > start and kept_size < tail:
        block_start = max(start, pos - BLOCK)
        f.seek(block_start)
        parts = (f.read(pos - block_start) + carry).split(b"\n")
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
