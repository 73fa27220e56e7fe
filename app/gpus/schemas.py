"""The GPU panel (GET /api/gpus) and per-user accounting (GET /api/usage)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from app.timeutil import UtcDateTime

GpuState = Literal["free", "leased", "busy (external)"]


class GpuOut(BaseModel):
    index: int
    state: GpuState
    # Set when state is "leased": the run holding it, its owner and since when.
    run_id: int | None = None
    owner: str | None = None
    since: UtcDateTime | None = None
    # A multi-node run's GPU: the run's hosts in node order (node 0's first) and this host's
    # node; a single-host run's leave them empty.
    run_hosts: list[str] = []
    node: int | None = None
    # From NVML at the host's last heartbeat; None when unknown (fake inventory, no NVML).
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    utilization: float | None = None
    # The holding run's CPU share over the last minutes (app.metrics.cpu_share), and whether
    # it starves; None while it has too few points.
    cpu_share: str | None = None
    cpu_starved: bool = False


class HostOut(BaseModel):
    host: str
    heartbeat_at: UtcDateTime
    gpus: list[GpuOut]
    pool: str = "local"  # the pool its worker serves (TORCHYARD_WORKER_POOL)
    # How its worker runs the pool's runs (TORCHYARD_WORKER_EXECUTOR): 'process' or 'slurm'.
    executor: str = "process"


class PoolOut(BaseModel):
    name: str
    hosts: list[str]  # its live worker hosts, by name
    # How its workers run its runs: 'process' (on their hosts' GPUs, placed by torchyard) or
    # 'slurm' (handed to a Slurm cluster, which schedules them).
    executor: str = "process"


class PoolsOut(BaseModel):
    # The pools with a live worker, by name ('local' first when it has one): what a run's
    # `resources.pool` may name and start soon.
    pools: list[PoolOut]


class QueuedRunOut(BaseModel):
    position: int  # 1-based, in scheduling order
    run_id: int
    experiment_id: int
    owner: str
    gpus: int  # on each of its `nodes` hosts
    nodes: int = 1
    priority: int
    created_at: UtcDateTime
    waiting_seconds: float
    reason: str


class UserShareOut(BaseModel):
    """One user's fair share (app/gpus/fairshare.py)."""

    user_id: int
    username: str
    gpu_hours: float  # decayed, running runs charged their expected length
    weight: float  # in force: the user's own, else their role's, else 1
    own_weight: float | None  # what an admin set for this user (null: the role's)
    effective: float  # gpu_hours / weight: the lower, the sooner their runs go
    share: float  # weight / the weights of every user running or waiting: their due fraction
    running_gpus: int
    queued_runs: int


class FairShareOut(BaseModel):
    half_life_hours: float
    # Users running or waiting, and any with usage left, lowest effective usage first.
    users: list[UserShareOut]


class ShareWeightIn(BaseModel):
    # > 0; null: the user's role's weight again (TORCHYARD_FAIR_SHARE_ROLE_WEIGHTS, else 1).
    weight: float | None


class GpuPanelOut(BaseModel):
    generated_at: UtcDateTime
    hosts: list[HostOut]
    queue: list[QueuedRunOut]
    fair_share: FairShareOut | None = None  # null: fair share is off


class UserUsageOut(BaseModel):
    user_id: int
    username: str
    gpu_hours: float
    runs: int  # runs that ran (any part of them) inside the period
    gpu_runs: int  # of those, the ones that held GPUs


class UsageOut(BaseModel):
    since: UtcDateTime
    until: UtcDateTime
    users: list[UserUsageOut]
