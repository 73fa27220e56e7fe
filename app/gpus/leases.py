"""A run's GPU leases: taken when it starts, renewed with its heartbeat, released with its
final status, expired when no worker renews them; the one writer of gpu_leases. Kept apart
from app.gpus.service (the scheduler's side) so app.runs.state.lifecycle can release them in the
transaction that ends the run without importing the scheduler."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.orm import Session

from app.gpus.models import GpuLease
from app.timeutil import utcnow


def heartbeat_leases(session: Session, *, run_id: int, now: datetime | None = None) -> None:
    session.execute(
        update(GpuLease).where(GpuLease.run_id == run_id).values(heartbeat_at=now or utcnow())
    )


def release_leases(session: Session, *, run_id: int) -> None:
    session.execute(delete(GpuLease).where(GpuLease.run_id == run_id))


def retake_leases(
    session: Session, *, run_id: int, host: str, indices: list[int], now: datetime
) -> None:
    """The run's GPUs leased again where a lease expired while no worker renewed it (a job
    re-adopted after its worker restarted). A GPU another run took meanwhile breaks the
    unique (host, gpu_index) at the flush: the caller's unit of work is refused whole."""
    held = set(session.scalars(select(GpuLease.gpu_index).where(GpuLease.run_id == run_id)))
    for index in indices:
        if index not in held:
            session.add(
                GpuLease(
                    host=host, gpu_index=index, run_id=run_id, acquired_at=now, heartbeat_at=now
                )
            )
    session.flush()


def take_leases(
    session: Session, *, run_id: int, nodes: Sequence[tuple[str, Sequence[int]]], now: datetime
) -> None:
    """Every node's GPUs for a starting run, in the caller's transaction: all of them or (the
    unique (host, gpu_index) refusing the flush) none. Heartbeated at `now`, the start's own
    time (a scheduler driven by a given clock: tests/test_fairshare.py)."""
    for host, indices in nodes:
        for index in indices:
            session.add(
                GpuLease(
                    host=host, gpu_index=index, run_id=run_id, acquired_at=now, heartbeat_at=now
                )
            )
    session.flush()


def expire_stale_leases(session: Session, *, now: datetime, ttl_seconds: float) -> int:
    """Free the leases of workers that stopped heartbeating (killed, host gone)."""
    cutoff = now - timedelta(seconds=ttl_seconds)
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(GpuLease).where(GpuLease.heartbeat_at < cutoff)
    )
    return int(result.rowcount)
