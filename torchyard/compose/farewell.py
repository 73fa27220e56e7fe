"""What `torchyard up` says as it stops (issue 41): the jobs its worker left training.

Ctrl-C stops the server and the worker, not the jobs (keep_jobs_on_worker_stop, on by
default: worker.supervise leaves them to the next worker, which re-adopts them). Said only in
the worker's WARNING lines, a reader took "torchyard stopped" to mean everything stopped; so
the last lines name each run still training on this host, and how to stop it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from sqlalchemy import select

from app.db import session_scope
from app.runs.models import Run, RunStatus
from app.settings import get_settings


@dataclass(frozen=True)
class LeftRunning:
    run_id: int
    name: str | None
    pid: int | None


def left_running() -> list[LeftRunning]:
    """The runs still running on this host's worker (its jobs, left to train on)."""
    settings = get_settings()
    host = settings.worker_host or socket.gethostname()
    with session_scope() as session:
        rows = session.execute(
            select(Run.id, Run.name, Run.pid)
            .where(Run.status == RunStatus.running, Run.worker_host == host)
            .order_by(Run.id)
        ).all()
    return [LeftRunning(run_id, name, pid) for run_id, name, pid in rows]


def farewell(runs: list[LeftRunning], *, kept: bool) -> list[str]:
    """The lines after "torchyard stopped": none when no job trains on."""
    if not runs or not kept:
        return []
    named = ", ".join(
        f"run {r.run_id}"
        + (f" {r.name!r}" if r.name else "")
        + (f" (pid {r.pid})" if r.pid is not None else "")
        for r in runs
    )
    jobs = "1 job trains on" if len(runs) == 1 else f"{len(runs)} jobs train on"
    first = runs[0].run_id
    return [
        f"{jobs} without torchyard: {named}.",
        "Their points wait in their run folders: the next `torchyard up` takes them over.",
        f"To stop one: `torchyard up`, then `torchyard cancel {first}` (or Cancel on its page);"
        " to stop them with torchyard, set TORCHYARD_KEEP_JOBS_ON_WORKER_STOP=0.",
    ]


def main() -> None:
    """Run by `up`'s supervisor once its children stopped (torchyard/compose/supervising.py)."""
    for line in farewell(left_running(), kept=get_settings().keep_jobs_on_worker_stop):
        print(line, flush=True)


if __name__ == "__main__":
    main()
