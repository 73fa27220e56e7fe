"""A viewer's lag in two parts: ingestion (the job's log() -> the point stored) and stream
(stored -> the viewer's event), for the benches that follow live streams (bench/load.py,
bench/flood.py). Without the split a slow stream and a slow forwarder read the same."""

from __future__ import annotations

import bisect
import threading
import time

import httpx
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

# How often each key's stored step is read: a part of the lag is known to about this.
STEPS_EVERY = 0.25

StepSamples = list[tuple[float, dict[tuple[int, str], int]]]


def stored_steps(engine: Engine, run_ids: list[int]) -> dict[tuple[int, str], int]:
    """Each key's last stored step (its summary, written with the points)."""
    from app.metrics.models import MetricKey

    stmt = select(MetricKey.run_id, MetricKey.key, MetricKey.last_step).where(
        MetricKey.run_id.in_(run_ids)
    )
    with Session(engine) as session:
        return {(r, k): step for r, k, step in session.execute(stmt) if step is not None}


def sample_steps(
    engine: Engine, stop: threading.Event, run_ids: list[int], steps: StepSamples
) -> None:
    """Each key's stored step every STEPS_EVERY s until `stop`, and once more after it."""
    while not stop.is_set():
        steps.append((time.time(), stored_steps(engine, run_ids)))
        stop.wait(STEPS_EVERY)
    steps.append((time.time(), stored_steps(engine, run_ids)))


def split_lags(
    seen: list[tuple[int, str, int, float, float]], steps: StepSamples
) -> tuple[list[float], list[float]]:
    """Each viewed point's (run, key, step, logged at, got at) lag in two: ingestion (the
    job's log() -> the first sample that has it stored) and stream (that sample -> the viewer
    got it). A point stored before the sampling began is left out."""
    series: dict[tuple[int, str], tuple[list[int], list[float]]] = {}
    for t, last in steps:  # each key's stored step only grows: bisect it
        for k, step in last.items():
            stored, times = series.setdefault(k, ([], []))
            stored.append(step)
            times.append(t)
    ingest, stream = [], []
    for run_id, key, step, logged_at, got_at in seen:
        stored, times = series.get((run_id, key), ([], []))
        at = bisect.bisect_left(stored, step)
        if at == len(stored) or times[at] == steps[0][0]:
            continue
        stored_at = min(times[at], got_at)  # sampled after the viewer had it
        ingest.append(max(0.0, stored_at - logged_at))
        stream.append(got_at - stored_at)
    return ingest, stream


def poll_parts(api: httpx.Client) -> dict[str, tuple[float, float]]:
    """The server's stream-poll histogram (app/ops/prometheus.py): part -> (sum s, count)."""
    parts: dict[str, list[float]] = {}
    for line in api.get("/metrics").text.splitlines():
        for suffix, i in (("_sum", 0), ("_count", 1)):
            name = f'torchyard_event_stream_poll_seconds{suffix}{{part="'
            if line.startswith(name):
                part = line[len(name) :].split('"', 1)[0]
                parts.setdefault(part, [0.0, 0.0])[i] = float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in parts.items()}
