"""`torchyard up`'s supervisor: the server and the worker run as two children; one that dies is
started again, the other keeps running.

Before, the first child to exit stopped everything: an OOM-killed worker took the web UI
down with it. Now a dead child is restarted after a backoff that doubles from 1 s to 30 s (and
starts over once a child has stayed up for a minute), and each event is printed. A child that
keeps dying within seconds of starting (a port already taken, a broken install) is not
retried for ever: after MAX_QUICK_FAILURES in a row, `up` stops and says so.

A child started with a `standby` argv (the server) keeps a spare beside it that has done its
imports and waits (torchyard/compose/standby.py): a restart hands the spare the port at once, so the
web UI answers again within seconds of a server's exit, not after a fresh interpreter's
imports (25-45 s on a loaded box, issue 27), and a new spare starts. A child that was asked to
stop (SIGTERM: an upgrade, an operator) is started again without a backoff; one that crashed
or was killed (SIGKILL, the OOM killer) waits out the backoff.

Stopping (Ctrl-C, SIGTERM) sends SIGTERM to both and waits for each as long as its own
shutdown takes: the worker gets its `shutdown_grace_seconds` to hand its runs back, plus a
margin, before it is killed (the old fixed 20 s cut the worker's 30 s grace short).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torchyard.compose.standby import GO

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
    popen: Callable[[Sequence[str]], subprocess.Popen[bytes]] = field(
        default=lambda argv: subprocess.Popen(list(argv))
    )
    standby: Sequence[str] | None = None  # a spare's argv (torchyard/compose/standby.py), if any
    spare: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """The spare, when one is waiting, takes over at once; else a fresh process. Then a
        new spare starts its imports for the next time."""
        if not self.hand_to_spare():
            self.proc = self.popen(self.argv)
        self.started_at = time.monotonic()
        self.restart_at = None

    def keep_spare(self, now: float) -> None:
        """A spare for the next restart, once the child has had SPARE_AFTER_SECONDS to start
        (their imports would compete on a busy box)."""
        if self.standby is None or self.spare is not None or not self.alive():
            return
        if now - self.started_at >= SPARE_AFTER_SECONDS:
            self.spare = subprocess.Popen(list(self.standby), stdin=subprocess.PIPE)

    def hand_to_spare(self) -> bool:
        """Tell a waiting spare to serve; False when there is none (or it died)."""
        spare = self.spare
        if spare is None or spare.poll() is not None or spare.stdin is None:
            self.drop_spare()
            return False
        try:
            spare.stdin.write(f"{GO}\n".encode())
            spare.stdin.close()
        except OSError:  # it died meanwhile
            self.drop_spare()
            return False
        self.proc, self.spare = spare, None
        return True

    def drop_spare(self) -> None:
        """End the spare (closing its stdin tells it so; SIGTERM if it is importing)."""
        spare, self.spare = self.spare, None
        if spare is None:
            return
        if spare.stdin:
            spare.stdin.close()
        if spare.poll() is None:
            spare.terminate()
        try:
            spare.wait(timeout=5)
        except subprocess.TimeoutExpired:
            spare.kill()
            spare.wait()

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
        child.drop_spare()
    for child in children:
        if child.alive():
            assert child.proc is not None
            child.proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    for child in children:
        if child.proc is None:
            continue
        try:
            child.proc.wait(timeout=max(0.1, start + child.stop_timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"the {child.name} did not stop within {child.stop_timeout:g} s; killing it")
            child.proc.kill()
            child.proc.wait()


def supervise(children: Sequence[Child]) -> int:
    """Run the children until Ctrl-C/SIGTERM (exit 0) or one keeps dying at once (exit 1)."""
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
        for child in children:
            if stopping:
                break
            if child.restart_at is not None:
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
