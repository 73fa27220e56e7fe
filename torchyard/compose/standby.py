"""A spare API server: it does its imports ahead of time, then waits for the supervisor's word
to serve, which brings it the listening socket.

After an upgrade's SIGTERM, a kill or a crash of a server, a fresh server spends its start
importing FastAPI, SQLAlchemy, pydantic, Celery and our routers: ~3 s of CPU, but 25-45 s of
wall time on a loaded box (issue 27 measured it). The spare has paid for that already, so the
supervisor (torchyard/compose/supervisor.py) hands it the port's work the moment a server says
it is stopping (torchyard/compose/serving.py), and the service answers again within seconds.

Its stdin is one end of a socket pair: the word (GO, a line) comes with the listening socket
as an SCM_RIGHTS file descriptor, so a spare holds no listening socket before it serves (a
process that holds one is a server; tests find servers that way). Any other line, or the end
of its stdin (the supervisor stopped), ends it without serving.

An upgrade replaces our code under a spare started before it: on the word, a spare whose
imported modules changed on disk (or are gone) starts over as a fresh server with the new
code, the slow path, rather than serve the old one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from app.prestart import schema_is_current
from app.runs.files.job_files import within
from torchyard.compose.processes import SPARE_WORD as GO
from torchyard.compose.serving import config, options, serve


def loaded_files(root: Path) -> dict[str, float]:
    """Each imported module's source file under `root` (our packages), with its mtime."""
    files: dict[str, float] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and within(Path(path), root):
            try:
                files[path] = os.stat(path).st_mtime
            except OSError:
                files[path] = -1.0
    return files


def changed(files: dict[str, float]) -> bool:
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime != mtime:
                return True
        except OSError:
            return True
    return False


# What a spare asks itself before it waits: the routing, every middleware, the token check's
# query and the error path are built and compiled on a process's first request (0.25 s of CPU
# against 2 ms warm: on a saturated box, ~10 s of wall time for the first answer after a
# takeover). None of these writes the database.
WARM_UP = ("/api/health", "/api/users/me", "/api/no-such-route")


def warm_up(app: Any) -> None:
    """A few requests through the built app, in-process, without its lifespan (the periodic
    work starts only once the spare serves)."""
    import httpx

    async def ask() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://spare") as client:
            for path in WARM_UP:
                await client.get(path, headers={"Authorization": "Bearer not-a-token"})

    try:
        asyncio.run(ask())
    except Exception as e:  # noqa: BLE001 - a cold spare still serves
        print(f"torchyard: the spare's warm-up failed ({e!r})", file=sys.stderr, flush=True)


def wait_for_word() -> int | None:
    """The listening socket's fd once the word comes on stdin; None: stop without serving."""
    channel = socket.socket(fileno=os.dup(0))
    try:
        data, fds, _flags, _addr = socket.recv_fds(channel, 64, 1)
    except OSError:
        return None
    finally:
        channel.close()
    if data.decode(errors="replace").strip() != GO or not fds:
        for fd in fds:
            os.close(fd)
        return None
    return fds[0]


def main(argv: list[str]) -> None:
    """`argv`: torchyard.compose.serving's options, without --fd (the word brings it)."""
    # A Ctrl-C in `up`'s terminal reaches the whole process group: the supervisor ends its
    # spare itself (closing its stdin), so a spare does not print a traceback for it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    args = options(argv)
    sys.path.insert(0, args.app_dir)
    # Every module of the factory, uvicorn's protocol and loop modules, and the app itself,
    # built ahead: the word leaves only the app's startup to do (on a box whose cores run 10
    # busy processes each, every CPU second there is ~11 s of wall time).
    settings = config(args.app)
    settings.load()
    warm_up(settings.loaded_app)
    schema_is_current()  # the code's migration head, read once (app/migrate.py caches it)
    files = loaded_files(Path(args.app_dir))
    print(f"torchyard: a spare server is ready (pid {os.getpid()})", file=sys.stderr, flush=True)
    fd = wait_for_word()
    if fd is None:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)  # exec keeps an ignored one
    if changed(files):
        print("torchyard: the code changed since the spare server started; starting fresh")
        os.set_inheritable(fd, True)
        os.execv(
            sys.executable,
            [sys.executable, "-P", "-m", "torchyard.compose.serving", *argv, "--fd", str(fd)],
        )
    serve(settings, socket.socket(fileno=fd), args.notify_fd)


if __name__ == "__main__":
    main(sys.argv[1:])
