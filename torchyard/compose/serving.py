"""One API server process of the supervised serving path (`torchyard up`, `torchyard serve`,
docker-compose.yml's api): uvicorn on a listening socket that the supervisor opened and hands
down (`--fd`), never one it binds itself.

Why the supervisor owns the socket (torchyard/compose/supervisor.py says the rest): every
server process, and the spare once told to serve (torchyard/compose/standby.py), accepts from
the same kernel queue. A server that stops closes only its own copy; connections that arrived
meanwhile wait in the queue for the next accept instead of being refused, and none is lost
the way a closing SO_REUSEPORT socket drops its own queue. uvicorn's `--fd` would do, but it
labels the socket AF_UNIX, so asyncio skips TCP_NODELAY on a TCP socket (40 ms of Nagle and
delayed ACK per response): here the socket is taken with its real family.

`--notify-fd`: the write end of the supervisor's pipe. On SIGTERM/SIGINT the server writes its
pid there before uvicorn starts its graceful shutdown, so the supervisor hands the port's
work to the spare at once, while this one drains its open requests (up to
GRACEFUL_SHUTDOWN_SECONDS; the event streams end at once with the "server stopping" hint,
app/ops/shutdown.py). Nothing pings a server: a busy one is never killed for being slow.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from types import FrameType

from torchyard.compose.processes import GRACEFUL_SHUTDOWN_SECONDS


def options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="torchyard.compose.serving")
    parser.add_argument("--app", required=True, help="the app factory, module:function")
    parser.add_argument("--app-dir", required=True, help="put first on sys.path")
    parser.add_argument("--fd", type=int, help="the inherited listening socket")
    parser.add_argument("--notify-fd", type=int, help="the supervisor's pipe")
    return parser.parse_args(argv)


def notify(fd: int | None) -> None:
    """Tell the supervisor this server is stopping (its pid, a line); never fails the stop."""
    if fd is None:
        return
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        pass


def serve(app: str, sock: socket.socket, notify_fd: int | None) -> None:
    """uvicorn on `sock`, with the options server_argv gives the CLI form."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            notify(notify_fd)
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app,
        factory=True,
        log_level="info",
        # The app trusts X-Forwarded-For only from its configured proxies (app/main.py).
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    Server(config).run(sockets=[sock])


def main(argv: list[str]) -> None:
    args = options(argv)
    sys.path.insert(0, args.app_dir)
    if args.fd is None:
        sys.exit("torchyard.compose.serving: --fd (the supervisor's listening socket) is required")
    serve(args.app, socket.socket(fileno=args.fd), args.notify_fd)


if __name__ == "__main__":
    main(sys.argv[1:])
