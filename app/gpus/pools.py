"""Pools (issue 40): every worker serves one pool (TORCHYARD_WORKER_POOL), recorded on its host's
row with each heartbeat (app.gpus.service.touch_host); a run names its pool in
`resources.pool` (default `local`). Its message goes to that pool's queue only
(app.broker.pool_queue), the scheduler places it on that pool's hosts only
(app.gpus.scheduler.pick_pools), and a pool with no live worker is the run's queue reason.

Which pools are live, and which were ever served, is read here: the experiment form's choice
(GET /api/pools), the re-send of lost messages (app.runs.state.dispatch) and the reasons.

A pool's workers record their executor too (worker_hosts.executor): a pool served by an outside
scheduler's worker (`slurm`: a submit host, no GPUs of its own) is not placed by torchyard's
scheduler nor refused for its hosts' GPUs; its scheduler decides (`outside_pools`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.gpus.models import WorkerHost
from app.settings_pools import LOCAL_POOL, PROCESS_EXECUTOR


def pool_of(config: Mapping[str, Any]) -> str:
    """The pool of a stored run config (validated when it was stored; one stored before pools
    existed is the local pool's)."""
    resources = config.get("resources") or {}
    return str(resources.get("pool") or LOCAL_POOL)


def live_pools(session: Session, *, now: datetime, ttl_seconds: float) -> dict[str, list[str]]:
    """Each pool with a live worker (a host heartbeat within the lease TTL): its hosts, by
    name."""
    cutoff = now - timedelta(seconds=ttl_seconds)
    rows = session.execute(
        select(WorkerHost.pool, WorkerHost.host)
        .where(WorkerHost.heartbeat_at >= cutoff)
        .order_by(WorkerHost.pool, WorkerHost.host)
    ).all()
    pools: dict[str, list[str]] = {}
    for pool, host in rows:
        pools.setdefault(pool, []).append(host)
    return pools


def served_pools(session: Session) -> set[str]:
    """Every pool a worker has ever served (its host's row, live or not)."""
    return set(session.scalars(select(WorkerHost.pool).group_by(WorkerHost.pool)))


def hosts_per_pool(session: Session) -> dict[str, int]:
    """How many hosts each pool has ever had."""
    rows = session.execute(select(WorkerHost.pool, func.count()).group_by(WorkerHost.pool))
    return {pool: int(count) for pool, count in rows}


def outside_pools(hosts: Iterable[WorkerHost]) -> dict[str, str]:
    """The pools among these (live) hosts whose worker hands runs to an outside scheduler:
    pool -> executor (e.g. 'slurm'). torchyard places none of their runs on GPUs."""
    return {h.pool: h.executor for h in hosts if h.executor != PROCESS_EXECUTOR}


def pool_executors(session: Session, *, now: datetime, ttl_seconds: float) -> dict[str, str]:
    """The executor of each pool with a live worker ('process' unless an outside scheduler's
    worker serves it)."""
    cutoff = now - timedelta(seconds=ttl_seconds)
    rows = session.execute(
        select(WorkerHost.pool, WorkerHost.executor).where(WorkerHost.heartbeat_at >= cutoff)
    ).all()
    executors: dict[str, str] = {}
    for pool, executor in rows:
        if executors.get(pool, PROCESS_EXECUTOR) == PROCESS_EXECUTOR:
            executors[pool] = executor
    return executors
