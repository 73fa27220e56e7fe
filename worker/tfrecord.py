"""TFRecord framing, read incrementally: how TensorBoard's event files are laid out.

Each record is

    uint64 length | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)

(little-endian). Reading stops at an incomplete trailing record (the writer may be
mid-write) and never moves past it. The length's CRC is always checked (8 bytes, cheap in
Python), so a garbage length is never trusted; the data's CRC only when the C
``google_crc32c`` module happens to be installed (a pure-Python CRC over every record would
cost ten times the protobuf parse that follows).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.runs.files.job_files import FileRefused, open_regular

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
# The largest record read: a longer one (whatever its length says, once that is all on disk)
# is skipped unread, so a hostile length never makes the worker read gigabytes into memory.
MAX_RECORD_BYTES = 16 * 1024 * 1024
_HEADER = 12  # uint64 length + uint32 crc
_FOOTER = 4


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def _crc32c_py(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _fast_crc32c() -> Callable[[bytes], int] | None:
    try:
        import google_crc32c

        return lambda data: int(google_crc32c.value(data))
    except ImportError:
        return None


_CRC_FAST = _fast_crc32c()


def masked_crc32c(data: bytes, crc: Callable[[bytes], int] = _crc32c_py) -> int:
    c = crc(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass
class Records:
    data: list[bytes]
    end: int  # the offset after the last record consumed (the start offset when none)
    corrupt_at: int | None = None  # a record whose length failed its CRC: reading stops there
    oversized: int = 0  # records over MAX_RECORD_BYTES skipped unread


def read_records(
    root: Path,
    relative: str,
    offset: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_record: int = MAX_RECORD_BYTES,
) -> Records:
    """Complete records from `offset`, about max_bytes of them (always at least one complete
    record up to max_record long; a longer one is skipped unread once all of it is on disk).
    A record whose data fails its CRC is skipped unless it is the last thing in the file (then
    it may still be being written, and reading waits). The file is ``root/relative``, reached
    without following a link at any depth (app.runs.files.job_files)."""
    max_bytes = max(max_bytes, _HEADER + _FOOTER)
    try:
        f = open_regular(root, relative)  # the job wrote it: no link followed, never blocking
    except (FileNotFoundError, FileRefused):
        return Records([], offset)
    with f:
        size = os.fstat(f.fileno()).st_size
        f.seek(offset)
        buf = f.read(max_bytes)
        pos = 0
        out: list[bytes] = []
        oversized = 0
        while len(buf) - pos >= _HEADER:
            header = buf[pos : pos + 8]
            (length,) = struct.unpack_from("<Q", buf, pos)
            (header_crc,) = struct.unpack_from("<I", buf, pos + 8)
            if masked_crc32c(header) != header_crc:
                return Records(out, offset + pos, corrupt_at=offset + pos, oversized=oversized)
            end = pos + _HEADER + length + _FOOTER
            if length > max_record:
                if offset + end > size:
                    break  # not all on disk (or a length no file reaches): wait
                log.warning(
                    "%s: skipping a record of %d bytes at byte %d", relative, length, offset + pos
                )
                oversized += 1
                pos = end
                if pos >= len(buf):
                    break
                continue
            if end > len(buf):
                if pos > 0 or offset + end > size:
                    break  # left for the next call, or still being written
                buf += f.read(end - len(buf))  # one record larger than max_bytes
                if end > len(buf):
                    break
            data = buf[pos + _HEADER : end - _FOOTER]
            if _CRC_FAST is not None:
                (data_crc,) = struct.unpack_from("<I", buf, end - _FOOTER)
                if masked_crc32c(data, _CRC_FAST) != data_crc:
                    if offset + end >= size:
                        break  # the last record: perhaps not all of it is on disk yet
                    log.warning("%s: skipping a corrupt record at byte %d", relative, offset + pos)
                    pos = end
                    continue
            out.append(data)
            pos = end
        return Records(out, offset + pos, oversized=oversized)
