"""A worker's run slots, and the builds that do not take one (issue 39).

A worker's concurrency (`--concurrency N`, worker_concurrency) is how many runs it trains at
once. An environment build (worker.env_build) can take twenty minutes; when a building run held
one of those slots, two runs building a 1,296 s environment held both slots of a worker and a
run that needed no build waited 20+ minutes behind them. So builds have a bounded pool of
their own (``env_build_concurrency``): Celery gets N + that many threads (worker.__main__),
and before a run is started (before its GPUs are leased) it claims here either a build place
(its environment is not built on this host yet) or a run slot; neither free: the run stays
queued and asks again (worker.tasks), giving its thread back. A run whose build has finished
moves into a run slot: at once when one is free, else it takes one anyway (at most the build
pool's size over N, for a moment: it holds its GPUs already, and waiting would keep them
idle), and runs that need no build wait until the count is below N again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class Claim:
    """A run's place: building (its environment first) or training."""

    building: bool
    _slots: Slots
    released: bool = False

    def built(self) -> None:
        """The environment is ready: the run's place becomes a run slot."""
        if self.building:
            self._slots._move_to_training()
            self.building = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._slots._release(self.building)


class Slots:
    """The counts of one worker process: runs training, runs building."""

    def __init__(self, runs: int, builds: int) -> None:
        self.runs = runs
        self.builds = builds
        self._lock = threading.Lock()
        self._training = 0
        self._building = 0

    def claim(self, *, needs_build: bool) -> Claim | None:
        """A place for a run about to start; None: none free, the run waits queued."""
        with self._lock:
            if needs_build:
                if self._building >= self.builds:
                    return None
                self._building += 1
            else:
                if self._training >= self.runs:
                    return None
                self._training += 1
        return Claim(needs_build, self)

    def _move_to_training(self) -> None:
        with self._lock:
            self._building -= 1
            self._training += 1

    def _release(self, building: bool) -> None:
        with self._lock:
            if building:
                self._building -= 1
            else:
                self._training -= 1

    def counts(self) -> tuple[int, int]:
        """(training, building) now."""
        with self._lock:
            return self._training, self._building


_slots: list[Slots] = []


def configure(runs: int, builds: int) -> None:
    """Set once by the worker's start (worker.__main__), before any task runs."""
    _slots[:] = [Slots(runs, builds)]


def slots() -> Slots | None:
    """This worker's slots; None in a process that never configured them (a test calling the
    runner directly): every run then starts as it did before."""
    return _slots[0] if _slots else None
