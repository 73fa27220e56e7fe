"""Receiving an upload: the multipart body streamed straight to a temp file while it is hashed,
never held in memory and never spooled twice (Starlette's form parser would spool it first).

Only the ``file`` part is kept; it may be at most ``max_code_bytes`` (a 413 naming the setting
once one byte more arrives). Other parts (a form's fields) are read and dropped, up to 64 KiB.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fastapi import Request
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header

from app.code.store import temp_dir
from app.errors import BadRequest, TooLarge, UnsupportedMedia

FILE_FIELD = "file"
MAX_OTHER_PART_BYTES = 64 * 1024


@dataclass(frozen=True)
class Received:
    path: Path  # the temp file; the caller removes it
    digest: str
    size_bytes: int


def too_large(max_bytes: int) -> TooLarge:
    return TooLarge(
        f"the code snapshot is larger than max_code_bytes ({max_bytes} bytes): leave "
        "data sets and build outputs out of it (.gitignore), or ask an admin to raise the cap"
    )


class _Parts:
    """python-multipart's callbacks: which part we are in, and where its bytes go."""

    def __init__(self, out: IO[bytes], max_bytes: int) -> None:
        self.out = out
        self.max_bytes = max_bytes
        self.sha = hashlib.sha256()
        self.size = 0
        self.other = 0
        self.files = 0
        self.in_file = False
        self._field = bytearray()
        self._value = bytearray()
        self._headers: dict[bytes, bytes] = {}

    def on_part_begin(self) -> None:
        self._headers = {}
        self.in_file = False

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[bytes(self._field).lower()] = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def on_headers_finished(self) -> None:
        _kind, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        if options.get(b"name") == FILE_FIELD.encode():
            self.files += 1
            if self.files > 1:
                raise BadRequest(f"send one {FILE_FIELD!r} part, not several")
            self.in_file = True

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if not self.in_file:
            self.other += len(chunk)
            if self.other > MAX_OTHER_PART_BYTES:
                raise BadRequest(f"form fields besides {FILE_FIELD!r} are limited to 64 KiB")
            return
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise too_large(self.max_bytes)
        self.sha.update(chunk)
        self.out.write(chunk)


async def receive(request: Request, *, max_bytes: int) -> Received:
    media, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if media != b"multipart/form-data" or not boundary:
        raise UnsupportedMedia(
            f"send multipart/form-data with the archive in a part named {FILE_FIELD!r}"
        )
    path = temp_dir() / f"upload-{secrets.token_hex(8)}"
    try:
        with path.open("wb") as out:
            parts = _Parts(out, max_bytes)
            parser = MultipartParser(
                boundary,
                {
                    "on_part_begin": parts.on_part_begin,
                    "on_header_field": parts.on_header_field,
                    "on_header_value": parts.on_header_value,
                    "on_header_end": parts.on_header_end,
                    "on_headers_finished": parts.on_headers_finished,
                    "on_part_data": parts.on_part_data,
                },
            )
            try:
                async for chunk in request.stream():
                    parser.write(chunk)
            except RuntimeError:  # the body was read already (a form with the CSRF token)
                raise BadRequest(
                    "send the CSRF token in the X-CSRF-Token header, not as a form field"
                ) from None
            except ValueError as exc:  # python-multipart's parse errors
                raise BadRequest(f"a malformed multipart body ({exc})") from None
            parser.finalize()
        if not parts.files:
            raise BadRequest(
                f"no {FILE_FIELD!r} part: send the archive as the field {FILE_FIELD!r}"
            )
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Received(path, f"sha256:{parts.sha.hexdigest()}", parts.size)
