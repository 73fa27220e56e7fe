"""A run attempt's check-in, which the supervision loop (worker.supervision) asks every round
whatever it supervises: a job (worker.watch, on a single host or any node of a multi-node
run), an environment build (worker.env_build), a step before the job starts or after it ends
(`worker.supervision.while_supervised`: a snapshot's unpack, the job base, the run's files
stored), the wait for the other nodes (worker.node_run.meet).

`Heartbeat.check` asks app.runs.state.lifecycle.check_in (node k > 0 of a multi-node run:
app.runs.nodes.node_check_in, its node's heartbeat), which stamps the heartbeat (and renews the
run's GPU leases) when one is due, and answers the attempt's standing; the loop's decision tree
(worker.supervision.decide) acts on every answer. `stops_as_cancelled` says which answers end
the run cancelled. NOT_OWNED (the run was handed over under this worker: requeued by a reaper
while the worker stalled or the database was away; for node k, the run ended or the node was
declared lost) is final: the loop stops the attempt's job at once and nothing more of it is
stored (the server refuses its batches too: app.runs.state.lifecycle.holds).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from app.db import Session, database_locked, session_scope
from app.runs import nodes
from app.runs.state import lifecycle
from app.runs.state.answers import Standing
from app.settings import get_settings
from app.settings_rules import run_stamp_seconds
from worker.ingest_gate import liveness_turn
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
        self.run = run
        self.every = run_stamp_seconds(get_settings())
        self._last = time.monotonic()

    def check(self) -> Standing | None:
        """The attempt's standing, in a unit of work of its own; None when the database could
        not be asked (it may be briefly away; the spool keeps everything meanwhile).

        Written at the head of the ingestion queue (worker.ingest_gate.liveness_turn), and
        tried again at once when SQLite's lock still refused it (a writer of another process:
        the API): liveness never waits behind ingestion, so a worker that is alive never
        looks lost."""
        beat = time.monotonic() - self._last >= self.every
        for tries_left in reversed(range(LOCK_TRIES)):
            try:
                with liveness_turn():
                    standing = self._ask(beat)
            except Exception as exc:
                if tries_left and database_locked(exc):
                    continue
                log.warning(
                    "run %s: heartbeat failed (%s); retry in the next round", self.run.run_id, exc
                )
                return None
            if beat:
                self._last = time.monotonic()
            return standing
        return None  # not reached: the last try returns or logs

    def _ask(self, beat: bool) -> Standing:
        with session_scope() as session:
            if self.run.node:  # node k > 0 of a multi-node run: its node's heartbeat
                return nodes.node_check_in(
                    session,
                    run_id=self.run.run_id,
                    attempt=self.run.attempt,
                    node=self.run.node,
                )
            return lifecycle.check_in(
                session,
                run_id=self.run.run_id,
                attempt=self.run.attempt,
                renew_leases=self.run.has_leases,
                beat=beat,
            )


# A check-in refused by SQLite's lock is tried this many times in the round (each try waits
# up to the busy timeout): a writer of another process held it.
LOCK_TRIES = 3
