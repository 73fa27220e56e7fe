"""MLflow's artifact API under /api/2.0/mlflow-artifacts/: a run's artifacts are its files.

A run's ``artifact_uri`` is ``mlflow-artifacts:/<experiment>/<run>/artifacts``; the client
turns it into ``.../mlflow-artifacts/artifacts/<experiment>/<run>/artifacts/<path>`` and PUTs,
GETs and lists there. Uploads land in the run's working directory (``<run_dir>/work``), which
is what GET /api/runs/{id}/files lists and serves, so an artifact is a file like any other on
the run's page. Uploads go only to runs logged from outside (a job's folder is its job's), each
path checked (no ``..``, no absolute path), each folder opened without following a link, the
file written under a temporary name and renamed into place, at most the run-files cap
(``run_files_store_max_bytes``) per file. Downloads and listings read through
app.runs.files.work_dir.serve (no link followed) for any run the caller may read.
"""

from __future__ import annotations

import os
import secrets
from pathlib import PurePosixPath
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.db import SessionDep
from app.mlflow import service
from app.mlflow.auth import MlflowUser, MlflowWriter
from app.mlflow.errors import MlflowRoute, denied, invalid, missing
from app.runs.files.disk import add_disk_use
from app.runs.files.job_files import FileRefused, components
from app.runs.files.work_dir import serve as work_dir
from app.settings import get_settings
from app.users import quota
from torchyard.contract import RunPaths

router = APIRouter(
    prefix="/api/2.0/mlflow-artifacts", route_class=MlflowRoute, include_in_schema=False
)
# The app's 1 MiB body limit is for JSON; an artifact is bounded by the run-files cap instead,
# counted as it streams in.
UNBOUNDED = 1 << 50
ARTIFACTS = "artifacts"


def _locate(path: str) -> tuple[str, str]:
    """``<experiment>/<run>/artifacts[/<rest>]`` -> (run id, rest)."""
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) < 3 or parts[2] != ARTIFACTS or not parts[1].isdigit():
        raise invalid(f"{path!r} is not an artifact path of a run: <experiment>/<run>/artifacts")
    return parts[1], "/".join(parts[3:])


def _open_folder(root_fd: int, parts: list[str]) -> int:
    """The folder ``parts`` under ``root_fd``, made where missing, reached without following a
    link; the caller closes it."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError:
        os.close(fd)
        raise
    return fd


class _Upload:
    """One artifact being written: a temporary file in its folder, renamed at the end."""

    def __init__(self, run_id: int, relative: str) -> None:
        parts = components(relative)
        root = RunPaths(get_settings().run_dir(run_id)).work
        root.mkdir(parents=True, exist_ok=True)
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            self.dir_fd = _open_folder(root_fd, parts[:-1])
        finally:
            os.close(root_fd)
        self.name = parts[-1]
        self.temp = f".{self.name}.{secrets.token_hex(4)}.part"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(self.temp, flags, 0o644, dir_fd=self.dir_fd)
        self.file = os.fdopen(fd, "wb")
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self.file.write(chunk)

    def finish(self) -> None:
        self.file.close()
        os.rename(self.temp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        os.close(self.dir_fd)

    def abandon(self) -> None:
        self.file.close()
        try:
            os.unlink(self.temp, dir_fd=self.dir_fd)
        finally:
            os.close(self.dir_fd)


def _writable_external(session: SessionDep, user: Any, run_ref: str) -> int:
    run = service.writable_run(session, user, run_ref)
    if run.origin is None:
        raise denied(
            f"run {run.id} is a torchyard job: its files are what its job writes, not uploads"
        )
    quota.refuse_upload(session, user, 0)  # 413 past the user's quota (app/users/quota.py)
    return run.id


@router.put("/artifacts/{path:path}", max_body_size=UNBOUNDED)
async def upload(path: str, request: Request, session: SessionDep, user: MlflowWriter) -> Any:
    run_ref, relative = _locate(path)
    if not relative:
        raise invalid("an artifact needs a file name after .../artifacts/")
    run_id = await run_in_threadpool(_writable_external, session, user, run_ref)
    limit = get_settings().run_files_store_max_bytes
    try:
        upload = await run_in_threadpool(_Upload, run_id, relative)
    except FileRefused as exc:
        raise invalid(str(exc)) from None
    except OSError as exc:  # a link or a file where a folder should be
        raise invalid(f"cannot write {relative!r}: {exc.strerror}") from None
    try:
        async for chunk in request.stream():
            upload.size += len(chunk)
            if upload.size > limit:
                raise invalid(f"an artifact may have at most {limit} bytes")
            await run_in_threadpool(upload.write, chunk)
        await run_in_threadpool(upload.finish)
        await run_in_threadpool(add_disk_use, session, run_id=run_id, size=upload.size)
    except BaseException:
        await run_in_threadpool(upload.abandon)
        raise
    return {}


@router.get("/artifacts/{path:path}")
def download(path: str, session: SessionDep, _user: MlflowUser) -> StreamingResponse:
    run_ref, relative = _locate(path)
    run = service.get_run(session, run_ref)
    try:
        found = work_dir.download(run.id, relative)
    except (FileRefused, FileNotFoundError):
        raise missing(f"Artifact {relative!r} of run {run.id}") from None
    if found.folder:
        raise invalid(f"{relative!r} is a folder: list it")
    headers = {"Content-Length": str(found.size)} if found.size is not None else {}
    return StreamingResponse(found.chunks, media_type="application/octet-stream", headers=headers)


def listing(run_id: int, relative: str) -> list[dict[str, Any]]:
    """The files and folders right under ``relative`` in the run's files, by name: MLflow's
    FileInfo (path, is_dir, file_size) with the path relative to ``relative``."""
    if ".." in PurePosixPath(relative).parts or relative.startswith("/"):
        raise invalid("Invalid path")
    prefix = f"{relative.strip('/')}/" if relative.strip("/") else ""
    entries: dict[str, dict[str, Any]] = {}
    for item in work_dir.run_files(run_id):
        if not item.path.startswith(prefix):
            continue
        rest = PurePosixPath(item.path[len(prefix) :])
        first = rest.parts[0]
        if len(rest.parts) > 1:
            entries.setdefault(first, {"path": first, "is_dir": True})
        else:
            entries[first] = {"path": first, "is_dir": False, "file_size": item.size_bytes}
    return [entries[k] for k in sorted(entries)]


@router.get("/artifacts")
def list_artifacts(request: Request, session: SessionDep, _user: MlflowUser) -> dict[str, Any]:
    run_ref, relative = _locate(request.query_params.get("path", ""))
    run = service.get_run(session, run_ref)
    return {"files": listing(run.id, relative)}
