"""The reaper: runs whose worker went away, found from any process (every worker and the API).

The decision is app.runs.state.recovery's, over the database alone: a running run whose heartbeat
is older than ``run_lost_seconds`` is failed or requeued. What only the run's own host can
tell (is its job still training under its keeper, did it end while no worker watched, what is
left in its spool) is a ``LocalJobs`` that the host's processes hand in with
``use_local_jobs`` (worker.liveness); a process without one (an API on a host that keeps no
run directories) decides from the database alone.
"""

from __future__ import annotations

import threading
from typing import Protocol

from sqlalchemy.orm import Session

from app.db import session_scope
from app.runs.nodes import reap_lost_nodes
from app.runs.state.recovery import Handover, reap_lost_runs
from app.settings import get_settings


class LocalJobs(Protocol):
    """This machine's view of the jobs it runs (see app.runs.state.recovery.reap_lost_runs)."""

    def salvage(self, session: Session, run_id: int) -> None:
        """Move what is left of the run's spool, in the caller's transaction."""

    def still_training(self, run_id: int) -> bool:
        """The run's job trains on here: not lost, waiting to be re-adopted."""

    def ended_unwatched(self, run_id: int) -> tuple[int, str | None] | None:
        """(exit status, error) of a job that ended here while no worker watched it."""


_local: list[LocalJobs] = []
_lock = threading.Lock()


def use_local_jobs(local: LocalJobs | None) -> None:
    """This process's view of the jobs on its machine (None: the database alone)."""
    with _lock:
        _local[:] = [local] if local is not None else []


def local_jobs() -> LocalJobs | None:
    with _lock:
        return _local[0] if _local else None


def reap_once(local: LocalJobs | None = None) -> list[Handover]:
    """One round, committed; ``local`` defaults to what this process was handed."""
    local = local or local_jobs()
    with session_scope() as session:  # a multi-node run's lost node fails it as one
        reap_lost_nodes(session, lost_after_seconds=get_settings().run_lost_seconds)
    with session_scope() as session:
        return reap_lost_runs(
            session,
            lost_after_seconds=get_settings().run_lost_seconds,
            salvage=local.salvage if local is not None else None,
            still_training=local.still_training if local is not None else None,
            ended_unwatched=local.ended_unwatched if local is not None else None,
        )
