"""What the scheduler decides over, read from the database: the queue, the GPUs held, the
live hosts and what their NVML stats say is someone else's. `decide` (app.gpus.service), the GPU
panel and the start estimates (app.gpus.start_estimates) all read this one view, so that a run's
reason, its place and its estimate agree."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.experiments.config.model import run_config
from app.gpus import fairshare
from app.gpus.models import GpuLease, WorkerHost
from app.gpus.pools import outside_pools, served_pools
from app.gpus.scheduler import FairShare, QueuedRun
from app.runs.models import Run, RunStatus
from app.runs.state.dispatch import message_lost, waiting_in_broker
from app.settings import get_settings
from app.timeutil import as_utc


@dataclass(frozen=True)
class SchedulerView:
    """What the scheduler decides over: the queue, each live host's free GPUs, pool and
    capacity (`decide` and the start estimates, app.gpus.start_estimates, read it alike)."""

    queue: list[QueuedRun]
    free: dict[str, list[int]]
    pools: dict[str, str]
    capacity: dict[str, int]
    served: Collection[str]
    outside: dict[str, str]
    fair: FairShare | None  # None: fair share off (app.gpus.fairshare)


def scheduler_view(
    session: Session,
    *,
    now: datetime,
    lease_ttl_seconds: float,
    host: str | None = None,
    inventory: list[int] | None = None,
) -> SchedulerView:
    queue = queued_runs(session, now)
    hosts = live_hosts(session, now=now, ttl_seconds=lease_ttl_seconds)
    inventories = {h.host: [int(i) for i in h.gpus] for h in hosts}
    stats = {h.host: h.gpu_stats for h in hosts}
    pools = {h.host: h.pool for h in hosts}
    if host is not None and inventory is not None:
        inventories[host] = list(inventory)
        pools.setdefault(host, get_settings().worker_pool)
    held = held_gpus(session)
    free = {}
    for h, gpus in inventories.items():
        taken = held.get(h, set()) | external_gpus(stats.get(h), held.get(h, set()))
        free[h] = [i for i in gpus if i not in taken]
    return SchedulerView(
        queue=queue,
        free=free,
        pools=pools,
        capacity={h: len(gpus) for h, gpus in inventories.items()},
        # Read only when a queued run's pool has no live host (its reason says more then).
        served=served_pools(session) if {r.pool for r in queue} - set(pools.values()) else (),
        outside=outside_pools(hosts),
        fair=fairshare.fair_share(session, now=now),
    )


def queued_runs(session: Session, now: datetime | None = None) -> list[QueuedRun]:
    """The queue; with ``now``, each run says whether its broker message is lost then."""
    rows = session.execute(
        select(
            Run.id,
            Run.priority,
            Run.created_at,
            Run.config,
            Run.task_seen_at,
            Run.dispatch,
            Run.owner_id,
        ).where(Run.status == RunStatus.queued, ~Run.cancel_requested)
    ).all()
    resources = {r.id: run_config(r.config).resources for r in rows}
    stale = {r.id: r.dispatch for r in rows if now and message_lost(r.task_seen_at, now)}
    # Only when some task has not come by: the broker is read then, not on every decision.
    pools = {resources[run_id].pool for run_id in stale}
    in_broker = waiting_in_broker(stale, pools) if stale else set()
    return [
        QueuedRun(
            id=r.id,
            gpus=resources[r.id].gpus,
            nodes=resources[r.id].nodes,
            priority=r.priority,
            created_at=as_utc(r.created_at),
            message_lost=r.id in stale and r.id not in in_broker,
            message_waiting=r.id in in_broker,
            pool=resources[r.id].pool,
            owner_id=r.owner_id,
        )
        for r in rows
    ]


def held_gpus(session: Session) -> dict[str, set[int]]:
    held: dict[str, set[int]] = {}
    for lease_host, index in session.execute(select(GpuLease.host, GpuLease.gpu_index)):
        held.setdefault(lease_host, set()).add(index)
    return held


def external_gpus(stats: list[dict[str, Any]] | None, leased: Collection[int]) -> set[int]:
    """GPUs running compute processes while torchyard holds no lease on them: someone else's
    (a job started by hand, another scheduler). Never handed out."""
    return {
        int(gpu["index"])
        for gpu in stats or ()
        if gpu.get("pids") and int(gpu["index"]) not in leased
    }


def live_hosts(session: Session, *, now: datetime, ttl_seconds: float) -> list[WorkerHost]:
    cutoff = now - timedelta(seconds=ttl_seconds)
    return list(
        session.scalars(
            select(WorkerHost).where(WorkerHost.heartbeat_at >= cutoff).order_by(WorkerHost.host)
        )
    )
