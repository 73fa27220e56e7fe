"""A spare API server for `torchyard up`: it does its imports ahead of time, then waits for the
supervisor's word (a line on its stdin) to serve.

After an upgrade's SIGTERM, a kill or a crash of the server, a fresh server spends its start
importing FastAPI, SQLAlchemy, pydantic, Celery and our routers: ~3 s of CPU, but 25-45 s of
wall time on a loaded box (issue 27 measured it), while the web UI refuses connections. The
spare has paid for that already, so the supervisor (torchyard/compose/supervisor.py) hands the
port to it the moment the server is gone and the UI answers again within seconds.

An upgrade replaces our code under a spare started before it: on the word, a spare whose
imported modules changed on disk (or are gone) starts over as a fresh uvicorn with the new
code, the slow path, rather than serve the old one. Any other line, or the end of its stdin
(the supervisor stopped), ends it without serving.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from app.runs.files.job_files import within

GO = "serve"


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


def main(argv: list[str]) -> None:
    """`argv`: uvicorn's arguments, the app factory first, `--app-dir` among them (what
    torchyard.cli.server.server_argv gives after `-m uvicorn`)."""
    # A Ctrl-C in `up`'s terminal reaches the whole process group: the supervisor ends its
    # spare itself (closing its stdin), so a spare does not print a traceback for it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    app_dir = argv[argv.index("--app-dir") + 1]
    sys.path.insert(0, app_dir)
    from uvicorn.config import Config
    from uvicorn.importer import import_from_string
    from uvicorn.main import main as uvicorn_main

    import_from_string(argv[0])  # the factory's module: every router, model and dependency
    # uvicorn's own protocol and loop modules, and one app built (what serving imports next)
    Config(argv[0], factory=True).load()
    files = loaded_files(Path(app_dir))
    print(f"torchyard: a spare server is ready (pid {os.getpid()})", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip() != GO:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)  # exec keeps an ignored one
    if changed(files):
        print("torchyard: the code changed since the spare server started; starting fresh")
        os.execv(sys.executable, [sys.executable, "-P", "-m", "uvicorn", *argv])
    uvicorn_main.main(args=argv, prog_name="uvicorn")


if __name__ == "__main__":
    main(sys.argv[1:])
