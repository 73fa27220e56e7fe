"""GPU leases (which run holds which GPU of which host) and the worker hosts' inventories."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.settings_pools import LOCAL_POOL, PROCESS_EXECUTOR
from app.timeutil import utcnow


class GpuLease(Base):
    __tablename__ = "gpu_leases"
    # The database, not the scheduler, guarantees that no two runs ever hold the same GPU.
    __table_args__ = (UniqueConstraint("host", "gpu_index", name="uq_gpu_leases_host_gpu_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    gpu_index: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Renewed by the worker while the job runs; a stale lease is a dead worker's and expires.
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class WorkerHost(Base):
    __tablename__ = "worker_hosts"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    # The host's GPU indices (NVML or the fake inventory); [] for a CPU-only host.
    gpus: Mapped[list[int]] = mapped_column(JSON, default=list)
    # How the other hosts reach this worker's jobs (TORCHYARD_WORKER_ADDRESS): where the nodes
    # of a multi-node run whose node 0 is here meet. None from a worker of before it existed.
    address: Mapped[str | None] = mapped_column(String(255), nullable=True)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The pool its worker serves (TORCHYARD_WORKER_POOL, issue 40): the scheduler places a run
    # only on hosts of the run's pool. 'local' for a worker of before pools existed.
    pool: Mapped[str] = mapped_column(String(32), default=LOCAL_POOL, server_default=LOCAL_POOL)
    # How its worker runs the pool's runs (TORCHYARD_WORKER_EXECUTOR): 'process' (jobs on this
    # host, placed on its GPUs by torchyard) or 'slurm' (a submit host: Slurm schedules them).
    executor: Mapped[str] = mapped_column(
        String(16), default=PROCESS_EXECUTOR, server_default=PROCESS_EXECUTOR
    )
    # NVML's view at the last heartbeat, one dict per GPU: index, memory_used, memory_total
    # (bytes), utilization (%), pids (compute processes); None without NVML (fake inventory).
    gpu_stats: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
