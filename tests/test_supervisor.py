"""`up`'s supervisor (torchyard/compose/supervisor.py) with real child processes: a restart hands
over to the waiting spare, which then serves; a child that was asked to stop (SIGTERM, or exit 0)
comes back at once, a killed one after the backoff; stopping ends the spare too."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.waits import wait_for
from torchyard.compose.supervisor import SPARE_AFTER_SECONDS, Child, Spare, on_exit, stop_all

SLEEP = "import time; time.sleep(60)"
# What the spare does once told to serve: says so in a file, then runs until stopped.
SPARE = """
import sys, time
if sys.stdin.readline().strip() == "serve":
    open(sys.argv[1], "w").write("serving")
    time.sleep(60)
"""


def _child(tmp_path: Path, code: str) -> Child:
    return Child(
        "server",
        [sys.executable, "-c", code],
        stop_timeout=5,
        standby=Spare([sys.executable, "-c", SPARE, str(tmp_path / "served")]),
    )


def test_a_restart_hands_over_to_the_spare_which_then_serves(tmp_path: Path) -> None:
    child = _child(tmp_path, "import time; time.sleep(60)")
    child.start()
    try:
        first = child.proc
        assert first is not None
        assert child.standby is not None
        child.keep_spare(time.monotonic())
        assert child.standby.proc is None  # not while the child itself starts
        child.keep_spare(time.monotonic() + SPARE_AFTER_SECONDS)
        spare = child.standby.proc
        assert spare is not None
        first.kill()
        first.wait()
        assert on_exit(child, time.monotonic())
        assert child.restart_at is not None and child.restart_at > time.monotonic()  # backoff
        child.start()
        assert child.proc is spare and child.standby.proc is None
        wait_for(lambda: (tmp_path / "served").exists(), timeout=30, what="the spare serving")
    finally:
        stop_all([child])
    assert child.proc is not None and child.proc.poll() is not None


def test_a_child_stopped_on_request_comes_back_at_once_and_stop_ends_the_spare(
    tmp_path: Path,
) -> None:
    child = _child(tmp_path, "import time; time.sleep(60)")
    child.start()
    assert child.proc is not None
    child.proc.terminate()  # uvicorn, once shut down, dies of the SIGTERM it handled
    child.proc.wait()
    now = time.monotonic()
    assert on_exit(child, now)
    assert child.restart_at == now
    child.proc.kill()
    child.argv = [sys.executable, "-c", "pass"]
    child.start()  # no spare yet: a fresh process
    assert child.proc is not None and not (tmp_path / "served").exists()
    child.proc.wait()
    assert on_exit(child, now) and child.restart_at == now  # exit 0: as asked too
    assert child.standby is not None
    child.keep_spare(time.monotonic())  # the child is gone: no spare for a dead child
    assert child.standby.proc is None
    child.standby.start()
    spare = child.standby.proc
    assert spare is not None
    stop_all([child])
    assert spare.wait(timeout=10) is not None and child.standby.proc is None
    assert not (tmp_path / "served").exists()


def test_a_server_that_says_it_stops_is_replaced_at_once_and_left_to_drain(
    tmp_path: Path,
) -> None:
    """The notice (torchyard/compose/serving.py writes its pid on SIGTERM): the spare serves in
    its place at once, shared by the pool's servers, while the old one drains until it exits."""
    spare = Spare([sys.executable, "-c", SPARE, str(tmp_path / "served")])
    pool = [Child(f"server {i}", [sys.executable, "-c", SLEEP], 5, standby=spare) for i in (1, 2)]
    for child in pool:
        child.start()
    try:
        pool[0].keep_spare(time.monotonic() + SPARE_AFTER_SECONDS)
        pool[1].keep_spare(time.monotonic() + SPARE_AFTER_SECONDS)  # one spare for the pool
        waiting = spare.proc
        assert waiting is not None
        old = pool[0].proc
        assert old is not None
        pool[0].hand_over(time.monotonic())
        assert pool[0].proc is waiting and pool[0].draining == [(old, pool[0].draining[0][1])]
        wait_for(lambda: (tmp_path / "served").exists(), timeout=30, what="the spare serving")
        assert old.poll() is None  # not killed: it drains
        old.terminate()
        old.wait()
        pool[0].reap(time.monotonic())
        assert pool[0].draining == []
    finally:
        stop_all(pool)
    assert all(c.proc is not None and c.proc.poll() is not None for c in pool)
