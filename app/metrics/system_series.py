"""A run's system series (sys/ keys: the job's CPU, memory and GPUs, sampled by the worker,
worker.system_metrics): where its seconds count from, and under which keys a node's go. The
points themselves go in through app.metrics.ingest.ingest_points.

Each host of a multi-node run samples its own job and GPUs: node k's series are
``sys/node<k>/...`` (``sys/node1/cpu_percent``, ``sys/node1/gpu0/util``: GPU 0 of node 1's
host), node 0's included, so no node's series hides another's. A single-host run's keep
their plain ``sys/...`` names, as before.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.experiments.config.model import run_config
from app.gpus.models import GpuLease
from app.metrics.models import Metric, MetricKey
from app.runs.models import Run
from app.timeutil import as_utc
from torchyard.contract import SYSTEM_KEY_PREFIX


@dataclass(frozen=True)
class SeriesStart:
    """The Unix time of step 0 of the attempt's series, the GPUs the run leases on this host,
    and the prefix its keys take there (``sys/``, or ``sys/node<k>/`` on a multi-node run)."""

    at: float
    gpu_indices: tuple[int, ...]
    prefix: str = SYSTEM_KEY_PREFIX

    def key(self, key: str) -> str:
        """``sys/cpu_percent`` as this host stores it (``sys/node1/cpu_percent``)."""
        return self.prefix + key.removeprefix(SYSTEM_KEY_PREFIX)


def node_prefix(*, nodes: int, node: int) -> str:
    """Where node ``node``'s series go: ``sys/node<k>/`` on a run of several nodes, else
    ``sys/``."""
    return f"{SYSTEM_KEY_PREFIX}node{node}/" if nodes > 1 else SYSTEM_KEY_PREFIX


def series_start(
    session: Session,
    *,
    run_id: int,
    keys: Collection[str],
    node: int = 0,
    host: str | None = None,
) -> SeriesStart | None:
    """Step 0 is the attempt's `started_at`, moved back past the series (any of `keys`) of the
    run's earlier attempts (a requeue keeps them: app.runs.state.recovery), so the next attempt's
    seconds follow the last one's instead of landing on its steps (the first point of a step
    is kept). None when the run has no start (nothing to count seconds from). Read from the
    database, so a watch loop that starts again for the same attempt counts from the same
    step 0.

    ``node``, ``host``: the sampling host's node of a multi-node run and its name (its
    leased GPUs are read from gpu_leases: the run's ``gpu_indices`` are node 0's); ``keys``
    are the plain ``sys/`` names, looked up under the node's prefix."""
    row = session.get(Run, run_id)
    if row is None or row.started_at is None:
        return None
    nodes = run_config(row.config or {}).resources.nodes
    prefix = node_prefix(nodes=nodes, node=node)
    keys = [prefix + k.removeprefix(SYSTEM_KEY_PREFIX) for k in keys]
    started = as_utc(row.started_at).timestamp()
    earlier = session.scalar(
        select(func.max(Metric.step))
        .join(MetricKey, Metric.key_id == MetricKey.id)
        .where(
            MetricKey.run_id == run_id,
            MetricKey.key.in_(list(keys)),
            Metric.wall_time < started,
        )
    )
    if earlier is not None:
        started -= earlier + 1
    if node and host is not None:
        leased = session.scalars(
            select(GpuLease.gpu_index)
            .where(GpuLease.run_id == run_id, GpuLease.host == host)
            .order_by(GpuLease.gpu_index)
        )
        indices = tuple(int(i) for i in leased)
    else:
        indices = tuple(int(i) for i in (row.gpu_indices or "").split(",") if i.strip())
    return SeriesStart(at=started, gpu_indices=indices, prefix=prefix)
