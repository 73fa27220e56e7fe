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

import os
import signal
import socket
import sys
from pathlib import Path

from app.runs.files.job_files import within
from torchyard.compose.processes import SPARE_WORD as GO
from torchyard.compose.serving import options, serve


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
    from uvicorn.config import Config
    from uvicorn.importer import import_from_string

    import_from_string(args.app)  # the factory's module: every router, model and dependency
    # uvicorn's own protocol and loop modules, and one app built (what serving imports next)
    Config(args.app, factory=True).load()
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
    serve(args.app, socket.socket(fileno=fd), args.notify_fd)


if __name__ == "__main__":
    main(sys.argv[1:])
