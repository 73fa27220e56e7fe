"""The GPU panel: each live host's GPUs (who holds which) and the queue with the scheduler's
reasons, from the same decision `try_start` takes (app.gpus.service). Per-user accounting:
app.gpus.usage.

A multi-node run shows on each of its hosts: gpu_leases holds every node's rows. Its GPUs say
the run's hosts in node order and which node each host is: `try_start` adds one start's leases
node by node, in rank order, so the order of their ids is the order of the nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.gpus import fairshare
from app.gpus.fleet_view import external_gpus, live_hosts, queued_runs
from app.gpus.models import GpuLease
from app.gpus.scheduler import queue_order
from app.gpus.schemas import GpuOut, GpuPanelOut, GpuState, HostOut, QueuedRunOut
from app.gpus.service import panel_decision, reason_of
from app.metrics.cpu_share import cpu_shares
from app.runs.models import Run
from app.timeutil import as_utc

_MB = 1024 * 1024


def _mb(value: Any) -> float | None:
    return None if value is None else round(float(value) / _MB, 1)


def gpu_panel(
    session: Session, *, now: datetime, lease_ttl_seconds: float, starvation_seconds: float
) -> GpuPanelOut:
    """Each live host's GPUs (who holds which) and the queue in scheduling order, each waiting
    run with the reason `pick` gives for it."""
    leases: dict[str, dict[int, tuple[int, str, datetime]]] = {}
    first_lease: dict[int, dict[str, int]] = {}  # run -> host -> its lowest lease id
    rows = session.execute(
        select(
            GpuLease.id,
            GpuLease.host,
            GpuLease.gpu_index,
            GpuLease.run_id,
            GpuLease.acquired_at,
            User.username,
        )
        .join(Run, Run.id == GpuLease.run_id)
        .join(User, User.id == Run.owner_id)
    )
    for lease_id, host, index, run_id, acquired_at, username in rows:
        leases.setdefault(host, {})[index] = (run_id, username, as_utc(acquired_at))
        hosts_of = first_lease.setdefault(run_id, {})
        hosts_of[host] = min(lease_id, hosts_of.get(host, lease_id))
    run_hosts = {
        run_id: sorted(by_host, key=by_host.__getitem__)
        for run_id, by_host in first_lease.items()
        if len(by_host) > 1
    }
    shares = cpu_shares(session, first_lease, now=now.timestamp())
    hosts = []
    for h in live_hosts(session, now=now, ttl_seconds=lease_ttl_seconds):
        stats = {int(g["index"]): g for g in h.gpu_stats or ()}
        leased = leases.get(h.host, {})
        external = external_gpus(h.gpu_stats, leased)
        gpus = []
        for index in sorted({int(i) for i in h.gpus} | set(stats) | set(leased)):
            stat = stats.get(index, {})
            known = {
                "memory_used_mb": _mb(stat.get("memory_used")),
                "memory_total_mb": _mb(stat.get("memory_total")),
                "utilization": stat.get("utilization"),
            }
            if index in leased:
                run_id, owner, since = leased[index]
                spans = run_hosts.get(run_id, [])
                share = shares.get(run_id)
                gpu = GpuOut(
                    cpu_share=share.text if share is not None else None,
                    cpu_starved=share is not None and share.starved,
                    index=index,
                    state="leased",
                    run_id=run_id,
                    owner=owner,
                    since=since,
                    run_hosts=spans,
                    node=spans.index(h.host) if spans else None,
                    **known,
                )
            else:
                state: GpuState = "busy (external)" if index in external else "free"
                gpu = GpuOut(index=index, state=state, **known)
            gpus.append(gpu)
        hosts.append(
            HostOut(
                host=h.host,
                heartbeat_at=as_utc(h.heartbeat_at),
                gpus=gpus,
                pool=h.pool,
                executor=h.executor,
            )
        )

    by_user = fairshare.shares(session, now=now) if fairshare.enabled() else None
    queue = queue_order(
        queued_runs(session),
        fairshare.as_fair(by_user) if by_user is not None else None,
        now=now,
        starvation_seconds=starvation_seconds,
    )
    decision = panel_decision(
        session, now=now, lease_ttl_seconds=lease_ttl_seconds, starvation_seconds=starvation_seconds
    )
    details = {
        run_id: (experiment_id, username)
        for run_id, experiment_id, username in session.execute(
            select(Run.id, Run.experiment_id, User.username)
            .join(User, User.id == Run.owner_id)
            .where(Run.id.in_([r.id for r in queue]))
        )
    }
    out = []
    for position, run in enumerate(queue, start=1):
        experiment_id, owner = details[run.id]
        out.append(
            QueuedRunOut(
                position=position,
                run_id=run.id,
                experiment_id=experiment_id,
                owner=owner,
                gpus=run.gpus,
                nodes=run.nodes,
                priority=run.priority,
                created_at=run.created_at,
                waiting_seconds=max(0.0, (now - run.created_at).total_seconds()),
                reason=reason_of(decision, run.id),
            )
        )
    return GpuPanelOut(
        generated_at=now,
        hosts=hosts,
        queue=out,
        fair_share=fairshare.table(by_user, queue) if by_user is not None else None,
    )
