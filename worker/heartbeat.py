"""The run's heartbeat and cancel check, written once for both loops that keep a claimed run
alive: the watch loop while its job trains (worker.watch) and the environment build before
the job starts (worker.env_build).

Each check asks app.runs.lifecycle.check_in, which stamps the heartbeat (and renews the
run's GPU leases) when one is due, and answers the attempt's standing. A loop stops the job
as cancelled when `stops_as_cancelled` says so. NOT_OWNED (the run was handed over under
this worker: requeued by a reaper while the worker stalled or the database was away) is
final: the loop stops the attempt's job at once and stores nothing more of it (the server
refuses its batches too: app.runs.lifecycle.holds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from app.db import Session, session_scope
from app.runs import lifecycle, nodes
from app.runs.lifecycle import Standing
from app.settings import get_settings
from worker.limits import RunLimits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Watched:
    """The run attempt a worker trains: whose heartbeat it stamps, whose leases it renews."""

    run_id: int
    attempt: int
    metrics_path: Path
    has_leases: bool
    # A sweep's trial: judged by the sweep's early-stopping rule as its points arrive.
    in_sweep: bool = False
    # The GPUs its job runs on: busy on this host until the job is gone (worker.held_gpus).
    gpus: tuple[int, ...] = ()
    # Its job's limits and cgroup (worker.limits); None: an attempt started without them.
    limits: RunLimits | None = None
    # A multi-node run's node on this host (worker.node_run); None: a run on one host. Node
    # k > 0 forwards only its log (worker.forwarder) and stores its series under sys/node<k>/.
    node: int | None = None

    def heartbeat(self, session: Session) -> bool:
        return lifecycle.heartbeat(
            session, run_id=self.run_id, attempt=self.attempt, renew_leases=self.has_leases
        )


def stops_as_cancelled(standing: Standing) -> bool:
    """The job is stopped and the run finished cancelled: its cancel was requested, or the
    run is gone (nothing to train for)."""
    return standing in (Standing.CANCEL_REQUESTED, Standing.DELETED)


class Heartbeat:
    """One run attempt's check-ins: the heartbeat stamped every `every` seconds (often enough
    that a lease never nears its expiry, rarely enough to spare SQLite's lock), the cancel
    looked at on every check."""

    def __init__(self, run: Watched) -> None:
        settings = get_settings()
        self.run = run
        self.every = min(settings.lease_ttl_seconds / 5, settings.run_heartbeat_seconds)
        self._last = time.monotonic()

    def check(self) -> Standing | None:
        """The attempt's standing, in a unit of work of its own; None when the database could
        not be asked (it may be briefly away; the spool keeps everything meanwhile)."""
        beat = time.monotonic() - self._last >= self.every
        try:
            with session_scope() as session:
                if self.run.node:  # node k > 0 of a multi-node run: its node's heartbeat
                    standing = nodes.node_check_in(
                        session,
                        run_id=self.run.run_id,
                        attempt=self.run.attempt,
                        node=self.run.node,
                    )
                else:
                    standing = lifecycle.check_in(
                        session,
                        run_id=self.run.run_id,
                        attempt=self.run.attempt,
                        renew_leases=self.run.has_leases,
                        beat=beat,
                    )
        except Exception as exc:
            log.warning(
                "run %s: heartbeat failed (%s); retry in the next round", self.run.run_id, exc
            )
            return None
        if beat:
            self._last = time.monotonic()
        return standing


T = TypeVar("T")


def while_heartbeating(run: Watched, work: Callable[[], T]) -> T:
    """`work()` in a thread while the attempt (node k's: its node) keeps heartbeating: a step
    before the job starts that may outlast run_lost_seconds on a busy host (a fresh data dir's
    job base) must not get the run, or a multi-node run's node, counted lost."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run_it() -> None:
        try:
            done.append(work())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run_it, name=f"run-{run.run_id}-prepare", daemon=True)
    thread.start()
    heartbeat = Heartbeat(run)
    while thread.is_alive():
        thread.join(timeout=heartbeat.every)
        if thread.is_alive():
            heartbeat.check()
    if failed:
        raise failed[0]
    return done[0]
