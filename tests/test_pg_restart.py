"""PostgreSQL restarted in the middle of a run: the worker's forwarder waits with backoff,
catches up, and the run finishes with every point its job logged.

Always on PostgreSQL (a database of its own, so the restart is the only thing that happens to
it), in the PostgreSQL + Redis pass only (tests/conftest.py POSTGRES_ONLY_MODULES): the restart
takes the whole server down, and the embedded pass, which runs beside it, uses none.
"""

from __future__ import annotations

import os
import subprocess
import time

import httpx
import pytest

from tests.conftest import BASE_DIR
from tests.databases import POSTGRES_URL, own_database, user_with_token
from tests.factories import spooled_points
from tests.stack import free_port, start_logged, stop_process, wait_healthy
from torchyard.compose.processes import server_argv, worker_argv

pytestmark = pytest.mark.slow

ROOT = BASE_DIR / "pg-restart"


def restart_postgres() -> None:
    versions = sorted(os.listdir("/etc/postgresql"))
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )


def test_a_run_survives_a_postgres_restart_with_every_point(tmp_path) -> None:
    if not POSTGRES_URL:
        if os.environ.get("CI") == "true":
            pytest.fail("TORCHYARD_TEST_POSTGRES_URL is not set: `make test` sets it")
        pytest.skip("needs TORCHYARD_TEST_POSTGRES_URL (make test sets it)")
    ROOT.mkdir(parents=True, exist_ok=True)
    with own_database("postgresql", ROOT, "pgrestart") as engine:
        token = user_with_token(engine, "bob")
        env = dict(
            os.environ,
            TORCHYARD_DATABASE_URL=engine.url.render_as_string(hide_password=False),
            TORCHYARD_DATA_DIR=str(ROOT / "data"),
            TORCHYARD_BROKER_URL=f"sqla+sqlite:///{ROOT / 'broker.db'}",
            PYTHONUNBUFFERED="1",
        )
        port = free_port()
        server = start_logged(server_argv("127.0.0.1", port), env, ROOT / "server.log")
        worker = start_logged(worker_argv(2), env, ROOT / "worker.log")
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, server, ROOT / "server.log")
            with httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30
            ) as api:
                config = {
                    "recipe": "tiny_mlp",
                    "params": {"epochs": 2, "steps_per_epoch": 200, "step_sleep": 0.02},
                    "seed": 9,
                }
                exp = api.post("/api/experiments", json={"name": "pg", "config": config})
                run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
                deadline = time.monotonic() + 90
                while api.get(f"/api/runs/{run_id}/metrics").json()["series"] == {}:
                    assert time.monotonic() < deadline, "the run never logged a point"
                    time.sleep(0.2)

                restart_postgres()  # while the job trains and the forwarder writes

                deadline = time.monotonic() + 180
                while True:
                    try:
                        run = api.get(f"/api/runs/{run_id}").json()
                    except httpx.HTTPError:
                        run = {"status": "?"}
                    if run["status"] in {"succeeded", "failed", "cancelled"}:
                        break
                    assert time.monotonic() < deadline, run
                    time.sleep(0.3)
                assert run["status"] == "succeeded", run
                series = api.get(f"/api/runs/{run_id}/metrics").json()["series"]
                # The worker's system series (sys/) are not spooled.
                stored = sum(len(s["step"]) for k, s in series.items() if not k.startswith("sys/"))
                assert stored == spooled_points(ROOT / "data" / "runs" / str(run_id))
                assert series["train/loss"]["step"] == list(range(1, 401))
                worker_log = (ROOT / "worker.log").read_text()
                assert "retry in" in worker_log  # it did notice the outage and waited
        finally:
            stop_process(worker)
            stop_process(server)
