"""`torchyard up`'s supervisor: the server and the worker run as two children; one that dies is
started again, the other keeps running.

Before, the first child to exit stopped everything: an OOM-killed worker took the web UI
down with it. Now a dead child is restarted after a backoff that doubles from 1 s to 30 s (and
starts over once a child has stayed up for a minute), and each event is printed. A child that
keeps dying within seconds of starting (a port already taken, a broken install) is not
retried for ever: after MAX_QUICK_FAILURES in a row, `up` stops and says so.

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

BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
# A child up this long is healthy again: its next death starts the backoff over.
HEALTHY_AFTER_SECONDS = 60.0
# A child that dies this soon after starting, this many times in a row, stops `up`.
QUICK_FAILURE_SECONDS = 10.0
MAX_QUICK_FAILURES = 5
POLL_SECONDS = 0.2


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

    def start(self) -> None:
        self.proc = self.popen(self.argv)
        self.started_at = time.monotonic()
        self.restart_at = None

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
    say(
        f"the {child.name} (pid {child.proc.pid}) {exit_text(child.proc.returncode)} after "
        f"{lived:.0f} s; starting it again in {child.backoff:g} s"
    )
    child.restart_at = now + child.backoff
    child.backoff = min(BACKOFF_MAX_SECONDS, child.backoff * 2)
    return True


def stop_all(children: Sequence[Child]) -> None:
    """SIGTERM every child, then wait for each up to its own stop timeout; kill what is left."""
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
    stop_all(children)
    print("torchyard stopped", flush=True)
    return 1 if failed else 0
