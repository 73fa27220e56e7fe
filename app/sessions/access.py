"""Who reaches a session's JupyterLab, for the proxy's HTTP and WebSocket routes alike: the
caller's bearer token or session cookie (app.auth), then app.ownership.find_session (its owner
and admins; an admin with a token only, never a signed-in browser's cookie: the lab's pages
come from a process the member controls, on this server's origin). A cookie is sent by the
browser on its own, and JupyterLab's page cannot send torchyard's CSRF header, so a cookie's
unsafe request or WebSocket must come from this server's own origin (the Origin header every
browser sends on those); a bearer token's needs nothing more. The answer is where the
session's Jupyter listens and the secret it takes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from app.auth.deps import SAFE_METHODS, session_cookie
from app.auth.models import User
from app.auth.service import check_token
from app.db import session_scope
from app.errors import Conflict, Forbidden, Unauthorized
from app.ownership import find_session
from app.runs.files.job_files import read_job_file
from app.runs.models import RunStatus
from app.settings import get_settings
from torchyard.contract import RunPaths

# What secrets.token_urlsafe writes; anything else in the file is not the worker's.
SECRET = re.compile(r"[A-Za-z0-9_-]{16,128}")


@dataclass(frozen=True)
class Lab:
    """A running session's Jupyter: its socket and the token torchyard set on it."""

    socket: Path
    token: str


def credentials(conn: HTTPConnection) -> tuple[str | None, bool]:
    """The caller's token and whether it came from the cookie."""
    scheme, _, value = conn.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), False
    return conn.cookies.get(session_cookie()), True


def same_origin(conn: HTTPConnection) -> bool:
    """The Origin header, when sent, names this server (the Host the browser asked)."""
    origin = conn.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == conn.headers.get("host", "").lower()


def authorize(conn: HTTPConnection, run_id: int, method: str) -> Lab:
    """The session's Jupyter for this caller, or the domain error that says why not (401,
    403, 404; 409 while the session is not running)."""
    token, from_cookie = credentials(conn)
    if not token:
        raise Unauthorized("not authenticated: sign in, or send 'Authorization: Bearer <token>'")
    if from_cookie and (method not in SAFE_METHODS) and not same_origin(conn):
        raise Forbidden("a session is opened from this server's own pages only")
    with session_scope() as session:
        user: User | str = check_token(session, token=token)
        if isinstance(user, str):
            raise Unauthorized(user)
        if user.must_change_password:
            raise Forbidden("change your password first (/account)")
        run = find_session(run_id, session, user)
        if from_cookie and run.owner_id != user.id:
            # The lab's pages are served by a process the member controls, on this server's
            # origin: in an admin's signed-in browser its script would act as the admin.
            raise Forbidden(
                f"session {run_id} is another member's: an admin reaches it with a token "
                "(Authorization: Bearer), not from a signed-in browser, since its pages run "
                "the member's code on this server's origin"
            )
        status = run.status
    if status is not RunStatus.running:
        raise Conflict(f"session {run_id} is {status.value}: its JupyterLab is not running")
    paths = RunPaths(get_settings().run_dir(run_id))
    secret = lab_secret(paths)
    if not secret or not paths.session_socket.exists():
        raise Conflict(f"session {run_id} is starting: its JupyterLab is not up yet")
    return Lab(paths.session_socket, secret)


def lab_secret(paths: RunPaths) -> str | None:
    """The session's secret as the worker wrote it (worker/session_job.py: token_urlsafe),
    read through the one safe opener: the folder is the job's, and a link there to
    /etc/shadow would have the proxy send that file to the job's socket as its token."""
    raw = read_job_file(paths.session_token, 256)
    secret = raw.decode("ascii", "replace").strip() if raw else ""
    return secret if SECRET.fullmatch(secret) else None
