"""A session's job (a run of kind session, app/sessions): JupyterLab instead of a training
script, started through the same launch, sandbox, uid, limits, network and environment as any
run's job (worker.runner builds the launch, then hands it here).

Jupyter listens on a unix socket in the run's folder (``RunPaths.session_socket``), never on a
port: a socket is a file, so it is reached by whoever can reach the folder (the run's uid and
the torchyard server, whose proxy is the only way in: app/sessions/proxy.py), not by another
job (each job's sandbox hides every other run's folder) nor by anything on the host's network.
Its kernels talk over ipc files beside it, not over TCP ports. A per-session secret
(``RunPaths.session_token``, made here, written 0600) is Jupyter's token: the proxy sends it,
so a process of the host that could open the socket still cannot use it. ``base_url`` is the
proxy's ``/sessions/<id>/lab/`` so Jupyter's own links and WebSockets work behind it; its root
is the run's work folder, so notebooks stay in the run's files.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from dataclasses import replace
from pathlib import Path

from torchyard.contract import RunPaths
from worker.launcher import Launch

# JupyterLab's page (its built assets) and prebuilt extensions are data files of the worker's
# environment (<prefix>/share/jupyter), not site-packages: the job base links only the latter
# (worker/job_base.py), and the sandbox binds the worker's environment read-only.
JUPYTER_DATA = Path(sys.prefix) / "share" / "jupyter"

# AF_UNIX addresses hold 107 bytes and a NUL (Linux's sun_path).
MAX_SOCKET_PATH = 107


def lab_url_path(run_id: int) -> str:
    """Where the server's proxy serves the session (Jupyter's base_url)."""
    return f"/sessions/{run_id}/lab/"


def prepare(run_dir: Path) -> str:
    """The session's folder, fresh for this attempt (an old socket is removed), and its new
    secret, written 0600 for the server's proxy; the sandbox gives both to the run's uid.

    The run's folder is the job's (an earlier attempt's job may have left ``.session`` as a
    link to /etc): every step here goes through descriptors taken without following a link,
    so root never changes the mode of, or writes into, a folder the job pointed at."""
    paths = RunPaths(run_dir)
    folder = paths.session_socket.parent
    if len(str(paths.session_socket)) > MAX_SOCKET_PATH:
        raise RuntimeError(
            f"the session's socket path {paths.session_socket} is longer than "
            f"{MAX_SOCKET_PATH} bytes: use a shorter TORCHYARD_DATA_DIR"
        )
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    run_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | nofollow)
    try:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.stat(folder.name, dir_fd=run_fd, follow_symlinks=False).st_mode):
                os.unlink(folder.name, dir_fd=run_fd)  # a link or a file the job left
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder.name, 0o700, dir_fd=run_fd)
        folder_fd = os.open(folder.name, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=run_fd)
    finally:
        os.close(run_fd)
    try:
        os.fchmod(folder_fd, 0o700)
        for old in (paths.session_socket, paths.session_token):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old.name, dir_fd=folder_fd)  # unlink never follows the name
        token = secrets.token_urlsafe(32)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow
        fd = os.open(paths.session_token.name, flags, 0o600, dir_fd=folder_fd)
    finally:
        os.close(folder_fd)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    return token


def lab_launch(launch: Launch, *, run_id: int, run_dir: Path, token: str) -> Launch:
    """The run's launch with JupyterLab as its job: same interpreter (the job base or the
    run's environment), environment variables and working folder."""
    paths = RunPaths(run_dir)
    argv = [
        launch.argv[0],
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--ServerApp.sock={paths.session_socket}",
        "--ServerApp.sock_mode=0600",
        f"--ServerApp.base_url={lab_url_path(run_id)}",
        f"--ServerApp.root_dir={paths.work}",
        # Jupyter checks the token the proxy sends; the proxy the login and the origin.
        "--ServerApp.allow_remote_access=True",
        # Kernels over ipc files in the session's folder: no port, even with the host's network.
        "--KernelManager.transport=ipc",
        f"--KernelManager.ip={paths.session_socket.parent / 'kernel'}",
        f"--LabApp.app_dir={JUPYTER_DATA / 'lab'}",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    env = dict(launch.env)
    env["JUPYTER_TOKEN"] = token
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["JUPYTER_PATH"] = str(JUPYTER_DATA)
    return replace(launch, argv=argv, env=env)
