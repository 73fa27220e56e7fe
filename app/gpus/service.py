"""Leases in the database: start a queued run when the scheduler says so, heartbeat, release.

`try_start` is the one place a run goes queued -> running. It runs in the caller's single
transaction, serialized across every worker of every host: PostgreSQL takes a transaction-level
advisory lock first; on SQLite the first statement is a write (this host's heartbeat), which
takes the database's one write lock for the rest of the transaction, so the reads after it see
a state nobody else can change before the commit. The unique (host, gpu_index) constraint backs
this up: a lease taken twice fails the insert, never shares a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import CursorResult, delete, func, select, update
from sqlalchemy.orm import Session

from app.gpus.models import GpuLease, WorkerHost
from app.gpus.scheduler import Decision, QueuedRun, pick
from app.runs.models import Run, RunStatus
from app.timeutil import as_utc, utcnow

# pg_advisory_xact_lock key of the scheduler ("tyGPU" in ASCII); any constant would do.
SCHEDULER_LOCK_KEY = 0x7479475055


@dataclass(frozen=True)
class StartResult:
    # started: this worker runs it now; wait: not yet, ask again; gone: not queued any more.
    outcome: Literal["started", "wait", "gone"]
    gpu_indices: tuple[int, ...] = ()
    config: dict[str, Any] | None = None
    resume_from: str | None = None
    reason: str = ""


def run_gpus(config: dict[str, Any]) -> int:
    return int(config.get("resources", {}).get("gpus", 0))


def format_indices(indices: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(i) for i in indices)


def try_start(
    session: Session,
    *,
    run_id: int,
    host: str,
    inventory: list[int],
    lease_ttl_seconds: float,
    starvation_seconds: float,
    now: datetime | None = None,
) -> StartResult:
    now = now or utcnow()
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(SCHEDULER_LOCK_KEY)))
    touch_host(session, host=host, gpus=inventory, now=now)  # on SQLite: the write lock
    expire_stale_leases(session, now=now, ttl_seconds=lease_ttl_seconds)

    run = session.get(Run, run_id, populate_existing=True)
    if run is None or run.status != RunStatus.queued or run.cancel_requested:
        return StartResult("gone")
    decision = decide(
        session,
        host=host,
        inventory=inventory,
        asking_run=run_id,
        now=now,
        lease_ttl_seconds=lease_ttl_seconds,
        starvation_seconds=starvation_seconds,
    )
    placement = decision.starts.get(run_id)
    if placement is None:
        return StartResult("wait", reason=decision.waiting.get(run_id, ""))
    if placement.host not in (None, host):
        return StartResult("wait", reason=f"fits on host {placement.host}, not here")
    for index in placement.gpu_indices:
        session.add(GpuLease(host=host, gpu_index=index, run_id=run_id, acquired_at=now))
    run.status = RunStatus.running
    run.started_at = now
    run.worker_host = host
    run.gpu_indices = format_indices(placement.gpu_indices)
    session.flush()
    return StartResult(
        "started",
        gpu_indices=placement.gpu_indices,
        config=run.config,
        resume_from=run.resume_from,
    )


def decide(
    session: Session,
    *,
    host: str,
    inventory: list[int],
    asking_run: int | None,
    now: datetime,
    lease_ttl_seconds: float,
    starvation_seconds: float,
) -> Decision:
    """The scheduler's view of the database: the queue and each live host's free GPUs."""
    rows = session.execute(
        select(Run.id, Run.priority, Run.created_at, Run.config).where(
            Run.status == RunStatus.queued, ~Run.cancel_requested
        )
    )
    queue = [
        QueuedRun(
            id=r.id, gpus=run_gpus(r.config), priority=r.priority, created_at=as_utc(r.created_at)
        )
        for r in rows
    ]
    inventories = live_inventories(session, now=now, ttl_seconds=lease_ttl_seconds)
    inventories[host] = list(inventory)
    held: dict[str, set[int]] = {}
    for lease_host, index in session.execute(select(GpuLease.host, GpuLease.gpu_index)):
        held.setdefault(lease_host, set()).add(index)
    free = {h: [i for i in gpus if i not in held.get(h, set())] for h, gpus in inventories.items()}
    return pick(
        queue,
        free,
        now,
        starvation_seconds,
        capacity_by_host={h: len(gpus) for h, gpus in inventories.items()},
        asking=(asking_run, host) if asking_run is not None else None,
    )


def live_inventories(
    session: Session, *, now: datetime, ttl_seconds: float
) -> dict[str, list[int]]:
    cutoff = now - timedelta(seconds=ttl_seconds)
    hosts = session.scalars(select(WorkerHost).where(WorkerHost.heartbeat_at >= cutoff))
    return {h.host: [int(i) for i in h.gpus] for h in hosts}


def touch_host(session: Session, *, host: str, gpus: list[int], now: datetime) -> None:
    """Upsert this host's inventory and heartbeat (an UPDATE first: it is the write lock)."""
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(WorkerHost).where(WorkerHost.host == host).values(gpus=list(gpus), heartbeat_at=now)
    )
    if not result.rowcount:
        session.add(WorkerHost(host=host, gpus=list(gpus), heartbeat_at=now))
        session.flush()


def expire_stale_leases(session: Session, *, now: datetime, ttl_seconds: float) -> int:
    """Free the leases of workers that stopped heartbeating (killed, host gone)."""
    cutoff = now - timedelta(seconds=ttl_seconds)
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(GpuLease).where(GpuLease.heartbeat_at < cutoff)
    )
    return int(result.rowcount)


def heartbeat_leases(session: Session, *, run_id: int, now: datetime | None = None) -> None:
    session.execute(
        update(GpuLease).where(GpuLease.run_id == run_id).values(heartbeat_at=now or utcnow())
    )


def release_leases(session: Session, *, run_id: int) -> None:
    session.execute(delete(GpuLease).where(GpuLease.run_id == run_id))
