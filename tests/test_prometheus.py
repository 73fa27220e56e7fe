"""`GET /metrics` (app/ops/prometheus.py), read with prometheus_client's own parser.

In-process for the figures themselves; a real uvicorn with two worker processes for the
per-process ones (request latency), which must add up whichever process a request reached.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.db import session_scope
from app.metrics.ingest import ingest_points
from tests.conftest import make_user
from tests.factories import make_run
from tests.stack import free_port, start_logged, stop_process, wait_healthy
from torchyard.compose.processes import server_argv


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def test_metrics_needs_a_signed_in_user(client) -> None:
    assert client.get("/metrics").status_code == 401


def test_runs_queue_and_points_ingested(client, user_headers) -> None:
    before = samples(client.get("/metrics", headers=user_headers).text)
    queued = make_run({"recipe": "tiny_mlp"}, status="queued")
    make_run({"recipe": "tiny_mlp"}, status="failed")
    with session_scope() as session:
        ingest_points(
            session, run_id=queued, points=[("train/loss", s, 1.0, 1.7e9) for s in range(7)]
        )
    r = client.get("/metrics", headers=user_headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    after = samples(r.text)
    for status, added in (("queued", 1), ("failed", 1), ("running", 0)):
        key = ("torchyard_runs", (("status", status),))
        assert after[key] == before[key] + added, status
    assert after[("torchyard_queue_length", ())] >= 1
    assert after[("torchyard_queue_oldest_wait_seconds", ())] >= 0
    ingested = ("torchyard_metric_points_ingested_total", ())
    assert after[ingested] == before[ingested] + 7
    assert ("torchyard_gpu_leases", ()) in after and ("torchyard_worker_hosts_alive", ()) in after
    # A re-ingested point is not counted twice.
    with session_scope() as session:
        ingest_points(session, run_id=queued, points=[("train/loss", 3, 1.0, 1.7e9)])
    again = samples(client.get("/metrics", headers=user_headers).text)
    assert again[ingested] == after[ingested]


def test_request_latency_is_labelled_by_route_template(client, user_headers) -> None:
    run_id = make_run({"recipe": "tiny_mlp"}, status="succeeded")
    client.get(f"/api/runs/{run_id}", headers=user_headers)
    text = client.get("/metrics", headers=user_headers).text
    routes = {
        s.labels["route"]
        for f in text_string_to_metric_families(text)
        if f.name == "torchyard_http_request_duration_seconds"
        for s in f.samples
    }
    assert "/api/runs/{run_id}" in routes and f"/api/runs/{run_id}" not in routes


@pytest.mark.slow
@pytest.mark.local_only  # counters of several server processes in their folder: no database in it
def test_several_server_processes_add_up(tmp_path: Path) -> None:
    """uvicorn --workers 2 sharing PROMETHEUS_MULTIPROC_DIR: 40 requests spread over both
    processes are all counted, and the database figures agree whichever process answers."""
    metrics_dir = tmp_path / "prom"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir()
    env = dict(os.environ) | {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    server = start_logged(server_argv("127.0.0.1", port, workers=2), env, log)
    headers = make_user(role="viewer")[2]
    try:
        wait_healthy(base, server, log)
        route = ("method", "GET"), ("route", "/api/health")

        def health_count() -> float:
            text = httpx.get(f"{base}/metrics", headers=headers).text
            return samples(text).get(("torchyard_http_request_duration_seconds_count", route), 0)

        start = health_count()
        pids = set()
        for _ in range(40):
            with httpx.Client() as fresh:  # a new connection each: both processes answer
                assert fresh.get(f"{base}/api/health").status_code == 200
        for f in metrics_dir.iterdir():
            pids.add(f.name.rsplit("_", 1)[-1])
        assert len(pids) >= 2, sorted(metrics_dir.iterdir())  # both processes wrote figures
        assert health_count() == start + 40
        runs = {
            httpx.get(f"{base}/metrics", headers=headers).text.count("torchyard_runs{")
            for _ in range(6)
        }
        assert runs == {5}  # one line per status, from every process alike
    finally:
        stop_process(server)
