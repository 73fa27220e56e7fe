"""Whether this server process has been asked to stop (SIGTERM, Ctrl-C), for the requests that
would otherwise keep it alive: the run event streams.

uvicorn stops on SIGTERM by closing its listening sockets and then waiting for every open
connection's response to end; a run's event stream ends only when its run finishes, so one
viewer on a long run kept a stopping server alive (refusing new connections) for minutes,
until its supervisor killed it (issue 27). The app is not told that the server is stopping
(the lifespan's shutdown comes only after the connections closed), so the lifespan chains a
handler in front of the server's own for SIGTERM and SIGINT: it notes the request and hands
the signal on. A stream that sees the note ends at once; its client reconnects with
Last-Event-ID to the restarted server and misses nothing.

The server's `--timeout-graceful-shutdown` (torchyard/cli/server.py) is the backstop for any other
long response (a large download): cut after that many seconds.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

_requested = threading.Event()
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Chained:
    """Notes the stop request, then calls the handler that was there before (uvicorn's)."""

    def __init__(self, previous: Callable[[int, FrameType | None], object]) -> None:
        self.previous = previous

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        _requested.set()
        self.previous(signum, frame)


def requested() -> bool:
    """True once this process was asked to stop: a long response should end now."""
    return _requested.is_set()


def request() -> None:
    """Note a stop request by hand (a server embedded some other way, and tests)."""
    _requested.set()


def install() -> None:
    """Called at the app's startup: chain the note in front of the server's own handlers.
    Signal handlers can only be set from the main thread; an app served from another thread
    (a test client) keeps its handlers as they are and is never stopped by a signal."""
    _requested.clear()
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _SIGNALS:
        previous = signal.getsignal(signum)
        if isinstance(previous, _Chained) or not callable(previous):
            continue  # already chained, or SIG_DFL / SIG_IGN: nothing serves requests here
        signal.signal(signum, _Chained(previous))
