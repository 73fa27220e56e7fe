"""The scheduler in the database: start a queued run when it says so, and the GPU panel.

`try_start` is the one place that decides a run goes queued -> running (the transition itself
is app.runs.state.lifecycle.start). It runs in the caller's single transaction, serialized across
every worker of every host: PostgreSQL takes a transaction-level advisory lock first; on
SQLite the first statement is a write (this host's heartbeat), which takes the database's one
write lock for the rest of the transaction, so the reads after it see a state nobody else can
change before the commit. The unique (host, gpu_index) constraint backs this up: a lease taken
twice fails the insert, never shares a GPU. A run's own leases: app.gpus.leases.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.orm import Session

from app.gpus import fairshare, leases
from app.gpus.fleet_view import live_hosts, queued_runs, scheduler_view
from app.gpus.leases import expire_stale_leases
from app.gpus.models import WorkerHost
from app.gpus.pools import outside_pools, pool_of
from app.gpus.scheduler import (
    Decision,
    NodePlacement,
    never_fits,
    pick_pools,
    queue_order,
)
from app.runs import nodes as run_nodes
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle
from app.settings import get_settings
from app.settings_pools import LOCAL_POOL
from app.timeutil import utcnow

# pg_advisory_xact_lock key of the scheduler ("tyGPU" in ASCII); any constant would do.
SCHEDULER_LOCK_KEY = 0x7479475055


class StartOutcome(enum.Enum):
    STARTED = "started"  # this worker runs it now: it is running, its leases taken
    WAIT = "wait"  # not yet (GPUs busy, runs ahead of it, fits elsewhere): ask again
    GONE = "gone"  # not queued any more (started by another worker, cancelled, deleted)


@dataclass(frozen=True)
class StartResult:
    outcome: StartOutcome
    gpu_indices: tuple[int, ...] = ()
    config: dict[str, Any] | None = None
    resume_from: str | None = None
    reason: str = ""
    attempt: int = 1
    sweep_id: int | None = None  # a sweep's trial (judged by its early-stopping rule)
    owner_id: int = 0  # whose run: the worker binds that user's caches (worker/user_cache.py)
    # A multi-node run's nodes in rank order, (host, GPU indices), every one leased; node 0
    # is this host. () for a single-host run.
    nodes: tuple[NodePlacement, ...] = ()


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
    gpu_stats: list[dict[str, Any]] | None = None,
    address: str | None = None,
    pool: str | None = None,
) -> StartResult:
    """`gpu_stats` is NVML's fresh view of this host (see WorkerHost.gpu_stats): a GPU running
    compute processes that torchyard has not leased is busy (external) and not handed out.
    `pool`: the asking worker's (default: this process's TORCHYARD_WORKER_POOL); a run of
    another pool never starts here."""
    given_now, now = now, now or utcnow()
    pool = pool or get_settings().worker_pool
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(SCHEDULER_LOCK_KEY)))
    # On SQLite: the write lock.
    touch_host(
        session,
        host=host,
        gpus=inventory,
        now=now,
        gpu_stats=gpu_stats,
        address=address,
        pool=pool,
    )
    expire_stale_leases(session, now=now, ttl_seconds=lease_ttl_seconds)

    run = session.get(Run, run_id, populate_existing=True)
    if run is None or run.status != RunStatus.queued or run.cancel_requested:
        return StartResult(StartOutcome.GONE)
    if pool_of(run.config) != pool:
        # Its message reached a worker of another pool (it goes to its pool's queue only:
        # app.broker.send_run): dropped here, the run is sent again to its own pool's queue
        # once its message counts as lost (app.runs.state.dispatch.resend_lost).
        return StartResult(StartOutcome.GONE, reason=f"a run of pool '{pool_of(run.config)}'")
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
        return StartResult(StartOutcome.WAIT, reason=decision.waiting.get(run_id, ""))
    # A multi-node run is started (all its nodes leased) by the worker of its node 0: the
    # asking host is node 0 whenever it is one of the run's hosts.
    if placement.host not in (None, host):
        where = ", ".join(h for h, _ in placement.nodes) or placement.host
        return StartResult(StartOutcome.WAIT, reason=f"fits on host {where}, not here")
    # Read after the decision: the finish that freed these GPUs had committed before `decide`
    # saw them free, so its finished_at is earlier. `now` can be older: it was taken before
    # the scheduler's lock, which may have been waited for while that finish went on.
    started = given_now or utcnow()
    # Guarded: a cancel from the API does not take the scheduler's lock and may have come in.
    if not lifecycle.start(
        session,
        run_id=run_id,
        host=host,
        gpu_indices=format_indices(placement.gpu_indices),
        started_at=started,
    ):
        return StartResult(StartOutcome.GONE)
    # Every node's GPUs in this one transaction: all of them or (the flush refused) none.
    nodes = list(placement.nodes or ((host, placement.gpu_indices),))
    leases.take_leases(session, run_id=run_id, nodes=nodes, now=started)
    if placement.nodes:  # each node's task goes to its host once this commits
        run_nodes.open_nodes(session, run_id=run_id, attempt=run.attempt, nodes=placement.nodes)
    return StartResult(
        StartOutcome.STARTED,
        gpu_indices=placement.gpu_indices,
        config=run.config,
        resume_from=run.resume_from,
        attempt=run.attempt,
        sweep_id=run.sweep_id,
        owner_id=run.owner_id,
        nodes=placement.nodes,
    )


def decide(
    session: Session,
    *,
    host: str | None,
    inventory: list[int] | None,
    asking_run: int | None,
    now: datetime,
    lease_ttl_seconds: float,
    starvation_seconds: float,
) -> Decision:
    """The scheduler's view of the database: the queue and each live host's free GPUs, each
    pool on its own hosts.

    `host`/`inventory`: the asking host's own fresh inventory (None: only what the database
    knows, e.g. for the GPU panel)."""
    view = scheduler_view(
        session,
        now=now,
        lease_ttl_seconds=lease_ttl_seconds,
        host=host,
        inventory=inventory,
    )
    return pick_pools(
        view.queue,
        view.free,
        view.pools,
        now,
        starvation_seconds,
        capacity_by_host=view.capacity,
        served=view.served,
        asking=(asking_run, host) if asking_run is not None and host is not None else None,
        outside=view.outside,
        fair=view.fair,
    )


def never_startable(
    session: Session,
    *,
    gpus: int,
    now: datetime,
    lease_ttl_seconds: float,
    nodes: int = 1,
    pool: str = LOCAL_POOL,
) -> str | None:
    """Why a new run asking for `gpus` GPUs could never start on the live hosts of its pool
    (the scheduler's own rule, `never_fits`, over the inventories `decide` uses), or None.
    With no live host in the pool None: a worker may be starting or restarting, and the run
    waits for it (its reason says so) rather than being refused on an empty view. None for a
    pool an outside scheduler serves (a Slurm pool): its scheduler decides, and says so."""
    hosts = live_hosts(session, now=now, ttl_seconds=lease_ttl_seconds)
    if pool in outside_pools(hosts):  # Slurm schedules it: its submit host's GPUs say nothing
        return None
    return never_fits(gpus, {h.host: len(h.gpus) for h in hosts if h.pool == pool}, nodes=nodes)


def panel_decision(
    session: Session, *, now: datetime, lease_ttl_seconds: float, starvation_seconds: float
) -> Decision:
    """The scheduler's decision with no host asking: what the GPU panel and a queued run's
    reason both show, so they always agree (with fair share, each waiting run's share and
    place in line: app.gpus.fairshare.annotate)."""
    decision = decide(
        session,
        host=None,
        inventory=None,
        asking_run=None,
        now=now,
        lease_ttl_seconds=lease_ttl_seconds,
        starvation_seconds=starvation_seconds,
    )
    if not fairshare.enabled():
        return decision
    by_user = fairshare.shares(session, now=now)
    order = queue_order(
        queued_runs(session),
        fairshare.as_fair(by_user),
        now=now,
        starvation_seconds=starvation_seconds,
    )
    return fairshare.annotate(decision, order, by_user)


def queue_reason(
    session: Session,
    *,
    run_id: int,
    now: datetime,
    lease_ttl_seconds: float,
    starvation_seconds: float,
) -> str:
    """Why a queued run waits, exactly as the GPU panel says it ("" when it is not queued)."""
    return queue_reasons(
        session,
        run_ids=[run_id],
        now=now,
        lease_ttl_seconds=lease_ttl_seconds,
        starvation_seconds=starvation_seconds,
    ).get(run_id, "")


def queue_reasons(
    session: Session,
    *,
    run_ids: Collection[int],
    now: datetime,
    lease_ttl_seconds: float,
    starvation_seconds: float,
) -> dict[int, str]:
    """`queue_reason` of several runs from one decision (a page of the runs list): each
    queued one's reason, the others left out."""
    decision = panel_decision(
        session, now=now, lease_ttl_seconds=lease_ttl_seconds, starvation_seconds=starvation_seconds
    )
    reasons = {run_id: reason_of(decision, run_id) for run_id in run_ids}
    return {run_id: reason for run_id, reason in reasons.items() if reason}


def touch_host(
    session: Session,
    *,
    host: str,
    gpus: list[int],
    now: datetime,
    gpu_stats: list[dict[str, Any]] | None = None,
    address: str | None = None,
    pool: str | None = None,
    executor: str | None = None,
) -> None:
    """Upsert this host's inventory, GPU stats, address, pool and executor (defaults: this
    process's TORCHYARD_WORKER_POOL and TORCHYARD_WORKER_EXECUTOR) and heartbeat (an UPDATE
    first: it is the write lock)."""
    settings = get_settings()
    values = dict(
        gpus=list(gpus),
        heartbeat_at=now,
        gpu_stats=gpu_stats,
        address=address,
        pool=pool or settings.worker_pool,
        executor=executor or settings.worker_executor,
    )
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(WorkerHost).where(WorkerHost.host == host).values(**values)
    )
    if not result.rowcount:
        session.add(WorkerHost(host=host, **values))
        session.flush()


def reason_of(decision: Decision, run_id: int) -> str:
    """What the GPU panel and a queued run's page say about it, from one decision."""
    if run_id in decision.waiting:
        return decision.waiting[run_id]
    placement = decision.starts.get(run_id)
    if placement is None:
        return ""
    if placement.host is None:
        return "starting: needs no GPUs, waiting for a free worker slot"
    return f"starting: GPUs {format_indices(placement.gpu_indices)} of {placement.host} are free"
