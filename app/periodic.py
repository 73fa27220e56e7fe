"""Periodic work: every background round of the API and the worker is declared here, one way.

A domain declares its job where it lives, in its own ``scheduled.py`` (app/runs,
app/notifications, app/sweeps; the worker's host heartbeat in worker/scheduled.py) with
``declare``: a name, the setting that holds its interval, and the kinds of process that run
it; app/scheduled.py lists the app's jobs. Each process starts one ``Runner`` for its kind
(the API in its lifespan, the worker when Celery says it is ready) and stops it on the way
out. This module knows no domain: the declarations import it, never the other way round.

One meaning for every interval: a job runs once as soon as its runner starts, then again every
``interval`` seconds, measured from the end of a round (a slow round never piles up); an
interval <= 0 disables the job in that process altogether (not even the first round). A
round's exception is logged and the next round retries: the database may be away a moment.
``wake(name)`` starts the job's next round at once (the notification outbox after a commit).

Each job gets its own thread, all owned by the one runner: a webhook that takes its full
timeout must not hold back the host heartbeat past the lease TTL, nor a slow reaping round
the outbox.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from app.settings import Settings, get_settings

log = logging.getLogger(__name__)


class Process(enum.Enum):
    """The kinds of process that run periodic work."""

    API = "api"
    WORKER = "worker"


Interval = str | Callable[[Settings], float]
Wait = Callable[[threading.Event, float], bool]


@dataclass(frozen=True)
class Job:
    """One kind of round. ``every``: the name of a Settings field (seconds), or a function of
    the settings for an interval derived from another one."""

    name: str
    run: Callable[[], object]
    every: Interval
    runs_in: frozenset[Process]
    poke: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def interval(self, settings: Settings) -> float:
        if callable(self.every):
            return float(self.every(settings))
        return float(getattr(settings, self.every))


_JOBS: dict[str, Job] = {}


def declare(
    name: str,
    run: Callable[[], object],
    *,
    every: Interval,
    runs_in: Iterable[Process],
    poke: threading.Event | None = None,
) -> Job:
    """Declare (or, on a re-import, replace) the job called ``name``; ``poke``: an event of
    the domain's own that starts the next round early (else the job gets one; see wake)."""
    if isinstance(every, str) and every not in Settings.model_fields:
        raise ValueError(f"periodic job {name!r}: no setting {every!r}")
    event = poke if poke is not None else threading.Event()
    job = Job(name=name, run=run, every=every, runs_in=frozenset(runs_in), poke=event)
    _JOBS[name] = job
    return job


def for_process(kind: Process, jobs: Iterable[Job]) -> list[Job]:
    """The jobs a process of ``kind`` runs."""
    return [job for job in jobs if kind in job.runs_in]


def wake(name: str) -> None:
    """Start the job's next round now (in every runner of this process that runs it)."""
    job = _JOBS.get(name)
    if job is not None:
        job.poke.set()


def _wait(event: threading.Event, timeout: float) -> bool:
    return event.wait(timeout)


def run_rounds(job: Job, interval: float, stop: threading.Event, wait: Wait = _wait) -> int:
    """The loop of one job until ``stop``: a round, then ``wait(job.poke, interval)`` (a poke or
    a stop ends the wait early). Returns how many rounds ran. ``wait`` is injectable so that
    tests drive the loop without a clock."""
    rounds = 0
    if interval <= 0:
        return rounds
    while not stop.is_set():
        job.poke.clear()
        try:
            job.run()
        except Exception:
            log.exception("periodic job %s failed; the next round retries", job.name)
        rounds += 1
        wait(job.poke, interval)
    return rounds


@dataclass
class Runner:
    """The periodic work of one process: ``start()`` once, ``stop()`` on the way out."""

    jobs: list[Job]
    settings: Settings = field(default_factory=get_settings)
    wait: Wait = _wait
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Runner:
        for job in self.jobs:
            interval = self.interval(job)
            if interval <= 0:
                log.info("periodic job %s is off (interval %s)", job.name, interval)
                continue
            thread = threading.Thread(
                target=run_rounds,
                args=(job, interval, self.stop_event, self.wait),
                name=f"periodic:{job.name}",
                daemon=True,
            )
            thread.start()
            self.threads.append(thread)
        return self

    def interval(self, job: Job) -> float:
        return job.interval(self.settings)

    def stop(self, timeout: float | None = None) -> None:
        """Ask every job to end after its round (a waiting job at once); with ``timeout``,
        wait that long for each thread."""
        self.stop_event.set()
        for job in self.jobs:
            job.poke.set()
        if timeout is not None:
            for thread in self.threads:
                thread.join(timeout)
