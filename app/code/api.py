"""POST /api/code (upload a snapshot) and GET /api/runs/{id}/code (download a run's).

An upload answers 201 with ``{"digest", "size_bytes"}`` when it stored the snapshot, and 200
with the same body when those bytes were stored already (nothing is written twice). Accepted:
a gzipped tar, or a zip (told apart by their first bytes), which is normalised to a tar.gz
first (app.code.zipnorm): the digest is then that tar.gz's. Every member is checked
(app.code.tarcheck); a refused archive is a 422 naming the member and the problem, and nothing
of it is kept.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from app.auth.models import User
from app.code import service, store, upload
from app.code.tarcheck import Limits, TarRefused, scan
from app.code.zipnorm import EMPTY_ZIP_MAGIC, GZIP_MAGIC, ZIP_MAGIC, zip_to_tar_gz
from app.db import SessionDep
from app.errors import Invalid, NotFound
from app.http_errors import error_responses
from app.ownership import OwnedRun, Writer
from app.settings import get_settings
from app.users import quota

router = APIRouter(prefix="/api", tags=["code"])
# The route reads its body itself, with its own cap (max_code_bytes, read per request); the
# app's 1 MiB limit for JSON bodies must not apply to it.
UNLIMITED_BODY = 2**62


_ERROR_JSON = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}


class CodeOut(BaseModel):
    digest: str = Field(examples=["sha256:" + "0" * 64])
    size_bytes: int


@router.post(
    "/code",
    status_code=status.HTTP_201_CREATED,
    response_model=CodeOut,
    max_body_size=UNLIMITED_BODY,
    responses={
        200: {"description": "These bytes were stored already", "model": CodeOut},
        **error_responses(400, 403),
        413: {
            "description": "Larger than max_code_bytes, or past the user's quota",
            "content": _ERROR_JSON,
        },
        415: {"description": "Not multipart/form-data", "content": _ERROR_JSON},
        422: {
            "description": "The archive is refused: the message names the member and why",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
            },
        },
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {"file": {"type": "string", "format": "binary"}},
                    }
                }
            },
        }
    },
)
async def upload_code(request: Request, user: Writer, session: SessionDep) -> Any:
    """Upload a code snapshot (multipart field `file`: a .tar.gz or a .zip of your folder);
    name its digest as the config's `code`, with `script` relative to the snapshot."""
    # A user at the quota is refused before the body is read (then again with its size).
    await run_in_threadpool(quota.refuse_upload, session, user, 0)
    received = await upload.receive(request, max_bytes=get_settings().max_code_bytes)
    # The request's session (the caller commits): the authentication may hold SQLite's write
    # lock in it already. Used from one thread at a time, as the sync dependencies do.
    registered = await run_in_threadpool(_store, session, received, user)
    body = CodeOut(digest=registered.digest, size_bytes=registered.size_bytes)
    code = status.HTTP_201_CREATED if registered.created else status.HTTP_200_OK
    return JSONResponse(body.model_dump(), status_code=code)


def _store(session: Session, received: upload.Received, user: User) -> service.Registered:
    limits = Limits.from_settings()
    archive, digest, size = received.path, received.digest, received.size_bytes
    converted: Path | None = None
    try:
        with archive.open("rb") as f:
            magic = f.read(4)
        if magic.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
            converted = store.temp_dir() / f"zip-{secrets.token_hex(8)}.tar.gz"
            zip_to_tar_gz(archive, converted, limits)
            archive.unlink()
            archive, digest = converted, store.file_digest(converted)
            size = converted.stat().st_size
        elif not magic.startswith(GZIP_MAGIC):
            raise TarRefused("not a gzipped tar archive nor a zip (by its first bytes)")
        if store.exists(digest) and service.touch(session, digest):
            # Checked when first stored: only marked used now.
            return service.Registered(digest, size, created=False)
        quota.refuse_upload(session, user, size)  # stored bytes count: the archive's
        contents = scan(archive, limits)
        if not store.exists(digest):
            store.put(archive, digest)
        return service.register(
            session, digest=digest, size_bytes=size, contents=contents, user_id=user.id
        )
    except TarRefused as exc:
        raise Invalid.at(
            ["body", upload.FILE_FIELD], str(exc), exc.member, kind="code_archive"
        ) from None
    finally:
        received.path.unlink(missing_ok=True)
        if converted is not None:
            converted.unlink(missing_ok=True)


@router.get(
    "/runs/{run_id}/code",
    response_class=StreamingResponse,
    tags=["runs"],
    responses={
        200: {
            "description": "The run's code snapshot (.tar.gz)",
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        },
        **error_responses(403, 404, non_json_route=True),
    },
)
def download_code(run: OwnedRun, session: SessionDep) -> Response:
    """The code snapshot the run ran (404 when it ran workspace code or a recipe)."""
    digest = service.run_code(run)
    found = store.open_archive(digest) if digest else None
    if digest is None or found is None:
        raise NotFound.of("code snapshot of run", run.id)
    short = digest.removeprefix("sha256:")[:12]
    headers = {"Content-Disposition": f'attachment; filename="run-{run.id}-code-{short}.tar.gz"'}
    if found.size is not None:
        headers["Content-Length"] = str(found.size)
    return StreamingResponse(found.chunks, media_type="application/gzip", headers=headers)
