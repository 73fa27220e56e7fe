"""`torchyard up`'s supervisor: the server and the worker run as two children; one that dies is
started again, the other keeps running.

Before, the first child to exit stopped everything: an OOM-killed worker took the web UI
down with it. Now a dead child is restarted after a backoff that doubles from 1 s to 30 s (and
starts over once a child has stayed up for a minute), and each event is printed. A child that
keeps dying within seconds of starting (a port already taken, a broken install) is not
retried for ever: after MAX_QUICK_FAILURES in a row, `up` stops and says so.

The API is served the same way by `torchyard up` and `torchyard serve` (docker-compose.yml's
api): this supervisor opens the listening socket and runs N server processes on it
(torchyard/compose/serving.py, TORCHYARD_API_PROCESSES in compose), all accepting from the
one kernel queue, plus one spare that has done its imports and waits
(torchyard/compose/standby.py). Nothing pings a server: uvicorn's own multi-process
supervisor SIGKILLed a worker that missed its 5 s health ping, and on a saturated box (load
30-546) it killed 79-98 busy API processes in minutes, cutting submissions mid-transaction
and every stream (issue 39). Here a server is restarted only when it has exited.

A server told to stop (SIGTERM: an upgrade, an operator) writes its pid on the notice pipe
before it drains: the spare is handed the socket at once and serves in its place while the
old one finishes its open requests (streams end at once with the "server stopping" hint), so
the service answers within a second or two of the SIGTERM instead of after a fresh
interpreter's imports (25-45 s on a loaded box, issue 27; 57-149 s for compose's uvicorn in
issue 39), and no connection is refused meanwhile: the socket never closes. A server that
crashed or was killed (SIGKILL, the OOM killer) is replaced after the backoff, by the spare
when one waits; a new spare starts once the replacement has had SPARE_AFTER_SECONDS.

Stopping (Ctrl-C, SIGTERM) sends SIGTERM to both and waits for each as long as its own
shutdown takes: the worker gets its `shutdown_grace_seconds` to hand its runs back, plus a
margin, before it is killed (the old fixed 20 s cut the worker's 30 s grace short).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from torchyard.compose.processes import SPARE_WORD as GO

BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
# A child up this long is healthy again: its next death starts the backoff over.
HEALTHY_AFTER_SECONDS = 60.0
# A child that dies this soon after starting, this many times in a row, stops `up`.
QUICK_FAILURE_SECONDS = 10.0
MAX_QUICK_FAILURES = 5
POLL_SECONDS = 0.2
# A child that ended like this was asked to stop (uvicorn re-raises the SIGTERM it handled
# once it has shut down): it is started again with no backoff.
STOPPED_AS_ASKED = (0, -signal.SIGTERM, -signal.SIGINT)
# A child's spare (torchyard/compose/standby.py) starts this long after the child did.
SPARE_AFTER_SECONDS = 5.0


class Spare:
    """The warmed spare (torchyard/compose/standby.py), one for all the servers of a pool: its
    stdin is one end of a socket pair, on which the word to serve comes with the listening
    socket (`listener`, an fd; None: only the word, for tests' stand-ins)."""

    def __init__(
        self, argv: Sequence[str], listener: int | None = None, pass_fds: Sequence[int] = ()
    ) -> None:
        self.argv, self.listener, self.pass_fds = list(argv), listener, tuple(pass_fds)
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: socket.socket | None = None

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(self.argv, stdin=theirs.fileno(), pass_fds=self.pass_fds)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.channel = ours

    def take(self) -> subprocess.Popen[bytes] | None:
        """Tell the waiting spare to serve and hand it the socket; None when there is none (or
        it died)."""
        proc, channel = self.proc, self.channel
        if proc is None or channel is None or proc.poll() is not None:
            self.stop()
            return None
        word = f"{GO}\n".encode()
        try:
            if self.listener is None:
                channel.sendall(word)
            else:
                socket.send_fds(channel, [word], [self.listener])
        except OSError:  # it died meanwhile
            self.stop()
            return None
        channel.close()
        self.proc, self.channel = None, None
        return proc

    def stop(self) -> None:
        """End the spare (closing its channel tells it so; SIGTERM if it is importing)."""
        proc, channel = self.proc, self.channel
        self.proc, self.channel = None, None
        if channel is not None:
            channel.close()
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Child:
    """One supervised process: how to start it and how long it may take to stop."""

    name: str
    argv: Sequence[str]
    stop_timeout: float
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_FIRST_SECONDS
    quick_failures: int = 0
    restart_at: float | None = None
    pass_fds: Sequence[int] = ()  # what it inherits: the listening socket, the notice pipe
    standby: Spare | None = None  # the spare (shared by a pool's servers), if any
    # Processes of this child that said they stop (SIGTERM), each with the time it may take.
    draining: list[tuple[subprocess.Popen[bytes], float]] = field(default_factory=list)

    def start(self) -> None:
        """The spare, when one is waiting, takes over at once; else a fresh process. Then a
        new spare starts its imports for the next time (keep_spare)."""
        proc = self.standby.take() if self.standby is not None else None
        self.proc = proc or subprocess.Popen(list(self.argv), pass_fds=tuple(self.pass_fds))
        self.started_at = time.monotonic()
        self.restart_at = None

    def keep_spare(self, now: float) -> None:
        """A spare for the next restart, once the child has had SPARE_AFTER_SECONDS to start
        (their imports would compete on a busy box)."""
        spare = self.standby
        if spare is None or spare.proc is not None or not self.alive():
            return
        if now - self.started_at >= SPARE_AFTER_SECONDS:
            spare.start()

    def hand_over(self, now: float) -> None:
        """The child said it stops (an upgrade's SIGTERM, an operator): it drains its open
        requests while the spare (or a fresh process) takes over at once."""
        assert self.proc is not None
        old = self.proc
        self.draining.append((old, now + self.stop_timeout))
        self.start()
        assert self.proc is not None
        self.restarts += 1
        say(
            f"the {self.name} (pid {old.pid}) is stopping; pid {self.proc.pid} serves in its "
            f"place (restart {self.restarts})"
        )

    def reap(self, now: float) -> None:
        """Forget drained processes that exited; kill one past its stop timeout."""
        for proc, deadline in list(self.draining):
            if proc.poll() is None and now < deadline:
                continue
            if proc.poll() is None:
                say(f"the {self.name} (pid {proc.pid}) did not stop in time; killing it")
                proc.kill()
                proc.wait()
            self.draining.remove((proc, deadline))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def say(text: str) -> None:
    print(f"torchyard: {text}", file=sys.stderr, flush=True)


def exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def on_exit(child: Child, now: float) -> bool:
    """Schedule a restart of a child that exited; False when it keeps dying at once."""
    assert child.proc is not None
    lived = now - child.started_at
    if lived >= HEALTHY_AFTER_SECONDS:
        child.backoff = BACKOFF_FIRST_SECONDS
    child.quick_failures = child.quick_failures + 1 if lived < QUICK_FAILURE_SECONDS else 0
    if child.quick_failures >= MAX_QUICK_FAILURES:
        say(
            f"the {child.name} {exit_text(child.proc.returncode)} {child.quick_failures} times "
            f"in a row within {QUICK_FAILURE_SECONDS:g} s of starting; stopping (its output "
            "above says why)"
        )
        return False
    asked = child.proc.returncode in STOPPED_AS_ASKED
    say(
        f"the {child.name} (pid {child.proc.pid}) {exit_text(child.proc.returncode)} after "
        f"{lived:.0f} s; starting it again in {0 if asked else child.backoff:g} s"
    )
    if asked:  # stopped on request (an upgrade's SIGTERM), not a crash: back at once
        child.restart_at = now
        return True
    child.restart_at = now + child.backoff
    child.backoff = min(BACKOFF_MAX_SECONDS, child.backoff * 2)
    return True


def stop_all(children: Sequence[Child]) -> None:
    """SIGTERM every child, then wait for each up to its own stop timeout; kill what is left."""
    for child in children:
        if child.standby is not None:
            child.standby.stop()
    procs = [(c, p) for c in children for p, _ in c.draining]
    procs += [(c, c.proc) for c in children if c.proc is not None]
    for _child, proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    for child, proc in procs:
        try:
            proc.wait(timeout=max(0.1, start + child.stop_timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"the {child.name} did not stop within {child.stop_timeout:g} s; killing it")
            proc.kill()
            proc.wait()


def stopping_pids(notices: int | None) -> set[int]:
    """The pids that wrote to the notice pipe (torchyard/compose/serving.py) since last read."""
    if notices is None:
        return set()
    data = b""
    while True:
        try:
            chunk = os.read(notices, 4096)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return {int(word) for word in data.split() if word.isdigit()}


def supervise(children: Sequence[Child], notices: int | None = None) -> int:
    """Run the children until Ctrl-C/SIGTERM (exit 0) or one keeps dying at once (exit 1).
    ``notices``: the read end (non-blocking) of the pipe on which servers say they stop."""
    stopping = False

    def _stop(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    for child in children:
        child.start()
    failed = False
    while not stopping and not failed:
        time.sleep(POLL_SECONDS)
        now = time.monotonic()
        told = stopping_pids(notices)
        for child in children:
            if stopping:
                break
            child.reap(now)
            if child.restart_at is None and child.proc is not None and child.proc.pid in told:
                child.hand_over(now)
            elif child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    child.start()
                    assert child.proc is not None
                    pid = child.proc.pid
                    say(f"the {child.name} started again (pid {pid}, restart {child.restarts})")
            elif not child.alive() and not on_exit(child, now):
                failed = True
                break
            child.keep_spare(now)
    stop_all(children)
    print("torchyard stopped", flush=True)
    return 1 if failed else 0
