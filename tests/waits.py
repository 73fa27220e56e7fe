"""Waits on conditions, never on the clock: a test that needs something to have happened polls
for it with a deadline, so it goes on as soon as it holds and fails with what it waited for
(a fixed sleep is too short on a loaded machine and too long everywhere else)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str | Callable[[], str],
    every: float = 0.05,
) -> T:
    """Poll `condition` until it returns something truthy, and return that; AssertionError
    naming `what` (a callable: evaluated then, to show the last state) past `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what() if callable(what) else what}")
        time.sleep(every)


def holds_for(
    condition: Callable[[], object],
    seconds: float,
    *,
    what: str | Callable[[], str],
    every: float = 0.2,
) -> None:
    """`condition` stays true for `seconds` (checked every `every` s): for what must NOT
    happen over a span of time, e.g. a run not reaped while its job trains on."""
    end = time.monotonic() + seconds
    while True:
        if not condition():
            raise AssertionError(f"stopped holding: {what() if callable(what) else what}")
        if time.monotonic() >= end:
            return
        time.sleep(every)
