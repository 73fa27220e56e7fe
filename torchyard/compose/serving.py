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
work to the spare at once, while this one drains: its open connections are answered for up
to LINGER_SECONDS, each response saying `Connection: close`, then what still runs gets
DRAIN_SECONDS (uvicorn's CLI form, server_argv, cuts after 3 s: a request cut at a graceful
timeout under the CPU hog answered 500 while its commit ran on); the event streams end at
once with the "server stopping" hint (app/ops/shutdown.py), and their clients reconnect
with Last-Event-ID. Nothing pings a server: a busy one is never killed for being slow.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

from torchyard.compose.processes import STOP_TIMEOUT_SECONDS

if TYPE_CHECKING:
    import uvicorn

# How long a stopping server keeps answering on its open connections before uvicorn closes the
# idle ones (it ends sooner once every client has gone): a client between two requests sends
# its next one in this time and is answered, with `Connection: close`, instead of cut.
LINGER_SECONDS = 1.5
# How long a stopping server lets its requests still running finish before it cuts them (a
# cut request answers 500, and its transaction may yet commit in its thread). The spare
# serves meanwhile, so a slow drain costs no one an answer; the event streams end at once,
# so on a box that is not saturated a server is gone within a second or two anyway. Below
# the supervisor's STOP_TIMEOUT_SECONDS, after which it kills.
DRAIN_SECONDS = int(STOP_TIMEOUT_SECONDS - LINGER_SECONDS) - 3


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


def config(app: str) -> uvicorn.Config:
    """uvicorn's settings for `app`'s factory, the options server_argv gives the CLI form."""
    import uvicorn

    return uvicorn.Config(
        app,
        factory=True,
        log_level="info",
        # The app trusts X-Forwarded-For only from its configured proxies (app/main.py).
        proxy_headers=False,
        timeout_graceful_shutdown=DRAIN_SECONDS,
    )


class CloseWhenStopping:
    """Once the server is stopping, every response says `Connection: close`: its client opens
    a new connection for the next request, which another server (or the spare) accepts. A
    stopping uvicorn closes an idle keep-alive connection at once, and a client that sent its
    next request on it just then got "Connection reset by peer" (2 of 220 requests under the
    CPU hog, tests/test_supervisor_cpu_hog.py): HTTP/1.1 lets a client retry that, httpx does
    not."""

    def __init__(self, app: Any, stopping: threading.Event) -> None:
        self.app, self.stopping = app, stopping

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start" and self.stopping.is_set():
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, sending)


def serve(settings: uvicorn.Config, sock: socket.socket, notify_fd: int | None) -> None:
    """uvicorn on `sock` (its app built here unless the spare built it ahead: `settings`
    loaded already). On SIGTERM: the supervisor told, the socket closed, then for up to
    LINGER_SECONDS the open connections are answered (with `Connection: close`) rather than
    cut, then uvicorn's own graceful shutdown (DRAIN_SECONDS for what still runs)."""
    import uvicorn

    stopping = threading.Event()
    if not settings.loaded:
        settings.load()
    settings.loaded_app = CloseWhenStopping(settings.loaded_app, stopping)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not stopping.is_set():
                stopping.set()
                notify(notify_fd)
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            for server in self.servers:
                server.close()
            for listener in sockets or []:
                listener.close()
            deadline = time.monotonic() + LINGER_SECONDS
            while self.server_state.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await super().shutdown()

    Server(settings).run(sockets=[sock])


def main(argv: list[str]) -> None:
    args = options(argv)
    sys.path.insert(0, args.app_dir)
    if args.fd is None:
        sys.exit("torchyard.compose.serving: --fd (the supervisor's listening socket) is required")
    serve(config(args.app), socket.socket(fileno=args.fd), args.notify_fd)


if __name__ == "__main__":
    main(sys.argv[1:])
