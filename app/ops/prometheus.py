"""`GET /metrics` in Prometheus' text format, for any signed-in user or token (a viewer's token
is enough for a scraper: the figures are the team's, like every read).

Two kinds of figures, so the answer is the same whichever API process a scrape reaches:
- from the database at scrape time: runs by status, the queue's length and oldest wait, GPU
  leases held, live worker hosts, points ingested (app/ops/counters.py: the workers add to it
  in the same transaction as the points, on any host);
- per process: request latency, open event streams and their polls' parts. With several
  uvicorn processes (`--workers`, the compose api), PROMETHEUS_MULTIPROC_DIR must name a
  directory they share (`torchyard up` and docker-compose.yml set it); prometheus_client then
  sums every process's files. Without it, those figures are this process's own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.auth.deps import CurrentUser
from app.db import session_scope
from app.gpus.models import GpuLease, WorkerHost
from app.ops import counters
from app.runs.models import Run, RunStatus
from app.settings import get_settings
from app.timeutil import utcnow

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUEST_SECONDS = Histogram(
    "torchyard_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and route template",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=None,
)
EVENT_STREAMS = Gauge(
    "torchyard_event_streams",
    "Open live event streams (SSE) of run pages and clients",
    registry=None,
    multiprocess_mode="livesum",
)
# Where an event stream's polls spend their time: `wait` for a poll thread (the fair turn,
# app/runs/streams/poll_pool.py), `read` the database and log, `encode` the JSON, `send` the events
# to the client's socket. bench/flood.py reads it to say where a lagging viewer's time goes.
STREAM_POLL_SECONDS = Histogram(
    "torchyard_event_stream_poll_seconds",
    "Time of each part of an event stream's polls: wait, read, encode, send",
    ["part"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=None,
)

router = APIRouter(tags=["health"])


class DatabaseCollector(Collector):
    """The figures every API process reads alike, from the database."""

    def collect(self) -> Iterator[Metric]:
        now = utcnow()
        with session_scope() as session:
            by_status = dict(
                session.execute(select(Run.status, func.count()).group_by(Run.status)).all()
            )
            oldest = session.scalar(
                select(func.min(Run.created_at)).where(Run.status == RunStatus.queued)
            )
            leases = session.scalar(select(func.count()).select_from(GpuLease)) or 0
            host_ttl = timedelta(seconds=get_settings().lease_ttl_seconds)
            hosts = session.scalar(
                select(func.count())
                .select_from(WorkerHost)
                .where(WorkerHost.heartbeat_at >= now - host_ttl)
            )
            ingested = counters.total(session, name=counters.POINTS_INGESTED)
        runs = GaugeMetricFamily("torchyard_runs", "Runs by status", labels=["status"])
        for status in RunStatus:
            runs.add_metric([status.value], by_status.get(status, 0))
        yield runs
        yield GaugeMetricFamily(
            "torchyard_queue_length",
            "Runs waiting to start",
            value=by_status.get(RunStatus.queued, 0),
        )
        wait = 0.0
        if oldest is not None:
            wait = max(0.0, (now - _aware(oldest)).total_seconds())
        yield GaugeMetricFamily(
            "torchyard_queue_oldest_wait_seconds",
            "Age of the oldest queued run (0 with none)",
            value=wait,
        )
        yield GaugeMetricFamily("torchyard_gpu_leases", "GPUs leased to runs", value=leases)
        yield GaugeMetricFamily(
            "torchyard_worker_hosts_alive", "Worker hosts with a recent heartbeat", value=hosts or 0
        )
        yield CounterMetricFamily(
            "torchyard_metric_points_ingested",
            "Metric points stored, counted as the workers ingest them",
            value=ingested,
        )


def _aware(when: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def build_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(REQUEST_SECONDS)
        registry.register(EVENT_STREAMS)
        registry.register(STREAM_POLL_SECONDS)
    registry.register(DatabaseCollector())
    return registry


_registry: CollectorRegistry | None = None


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def metrics(_user: CurrentUser) -> Response:
    """Prometheus exposition: runs, queue, GPU leases, workers, points, latency, streams."""
    global _registry
    if _registry is None:
        _registry = build_registry()
    return Response(generate_latest(_registry), media_type=CONTENT_TYPE_LATEST)


class RequestTimer:
    """ASGI middleware: each HTTP request's time to its response's start into REQUEST_SECONDS
    (an event stream counts until its first byte, not for the hours it stays open), labelled
    with the matched route's template (`/api/runs/{run_id}`), never the raw path: one label
    value per route, however many runs there are. Unmatched paths count as "unmatched"."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        observed = False

        def observe() -> None:
            nonlocal observed
            if not observed:
                observed = True
                template = getattr(scope.get("route"), "path", None) or "unmatched"
                elapsed = time.perf_counter() - start
                REQUEST_SECONDS.labels(scope["method"], template).observe(elapsed)

        async def timed_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                observe()
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            observe()
