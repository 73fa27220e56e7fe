"""GPU efficiency end to end (issue 42's Efficiency acceptance): a real server and a real
Celery worker with a fake inventory "0,1" whose NVML stand-in reads GPU 0 at 0% and GPU 1 at
70% (tests/nvml_standin.py), seconds for the minutes. Two runs of one admin on one GPU each:
the idle one gets the run notice and its owner's GPU-idle alert, the runs table sorts and
filters them by their mean / p95 utilisation, and the Fleet API adds up their GPU-hours,
mean utilisation and idle GPU-hours; a member's queued run is their runs waiting, and the
member sees their own row only."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.metrics.gpu_efficiency import MEM_PEAK, UTIL_MEAN, UTIL_P95
from tests import nvml_standin
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, DATA_DIR, make_user
from tests.notify_receivers import WebhookReceiver, wait_until, webhook_receiver
from tests.stack import LiveStack, running_stack

pytestmark = pytest.mark.slow

BUSY = 70.0


@pytest.fixture(scope="module")
def hook() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def stack() -> Iterator[LiveStack]:
    env = dict(
        os.environ,
        # Its own broker: the suite's shared worker (no GPUs) never takes these runs' tasks.
        TORCHYARD_BROKER_URL=f"sqla+sqlite:///{DATA_DIR / 'broker-efficiency.db'}",
        PYTHONUNBUFFERED="1",
        TORCHYARD_FAKE_GPUS="0,1",
        TORCHYARD_WORKER_HOST="eff-host",
        TORCHYARD_NVML_MODULE=str(Path(nvml_standin.__file__)),
        NVML_STANDIN_UTIL=f"0=0,1={BUSY:g}",
        TORCHYARD_SYSTEM_METRICS_INTERVAL_SECONDS="1",
        TORCHYARD_GPU_SUMMARY_SECONDS="1",
        TORCHYARD_GPU_IDLE_MINUTES="3",  # 3 s: a minute lasts a second here
        TORCHYARD_NOTIFY_MINUTE_SECONDS="1",
        TORCHYARD_NOTIFY_POLL_SECONDS="0.2",
        TORCHYARD_NOTIFY_WEBHOOK_ALLOW_NETWORKS="127.0.0.1/32",
    )
    with running_stack(
        env, BASE_DIR / "logs-efficiency", admin_password=ADMIN_PASSWORD, concurrency=3
    ) as s:
        yield s


def submit(api: httpx.Client, experiment_id: int) -> int:
    r = api.post(f"/api/experiments/{experiment_id}/runs", json={})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def experiment(api: httpx.Client, name: str, gpus: int) -> int:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": 2000, "step_sleep": 0.05},
        "resources": {"gpus": gpus, "nproc": 1},
    }
    r = api.post("/api/experiments", json={"name": name, "config": config})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def listed(api: httpx.Client, experiment_id: int, **params: str) -> list[int]:
    r = api.get("/api/runs", params={"experiment_id": experiment_id, **params})
    assert r.status_code == 200, r.text
    return [run["id"] for run in r.json()["runs"]]


def hours(run: dict[str, Any]) -> float:
    started = datetime.fromisoformat(run["started_at"])
    return (datetime.fromisoformat(run["finished_at"]) - started).total_seconds() / 3600


def test_idle_notice_alert_sorting_and_fleet(stack: LiveStack, hook: WebhookReceiver) -> None:
    owner, _, owner_auth = make_user(admin=True)
    member, _, member_auth = make_user()
    with stack.client(owner_auth) as api, stack.client(member_auth) as mine:
        saved = api.put(
            "/api/users/me/notifications", json={"webhook_url": hook.url, "gpu_idle_minutes": 3}
        )
        assert saved.status_code == 200, saved.text
        exp = experiment(api, "efficiency", 1)
        first = submit(api, exp)
        wait_until(lambda: api.get(f"/api/runs/{first}").json()["status"] == "running", 120)
        second = submit(api, exp)
        wait_until(lambda: api.get(f"/api/runs/{second}").json()["status"] == "running", 120)
        runs = {r: api.get(f"/api/runs/{r}").json() for r in (first, second)}
        on = {run["gpu_indices"]: r for r, run in runs.items()}
        assert set(on) == {"0", "1"}, runs
        idle, busy = on["0"], on["1"]
        waiting = submit(mine, experiment(mine, "efficiency-member", 2))

        # The idle run: its notice and its owner's alert; the busy one neither.
        def noticed(run_id: int) -> bool:
            return any("GPU idle" in n for n in api.get(f"/api/runs/{run_id}").json()["notices"])

        def alerted() -> set[tuple[int, str]]:
            return {(b["run"]["id"], b["event"]) for b in hook.bodies if b.get("run")}

        wait_until(lambda: noticed(idle), 60, f"the idle notice on run {idle}")
        wait_until(lambda: (idle, "gpu_idle") in alerted(), 30, "the GPU-idle alert")
        assert (busy, "gpu_idle") not in alerted() and not noticed(busy)

        # Runs waiting: the member's 2-GPU run behind both; the member sees only their row.
        ours = api.get("/api/fleet", params={"window": "24h"}).json()["users"]
        assert {u["username"]: u["runs_waiting"] for u in ours}[member] == 1
        own = mine.get("/api/fleet", params={"window": "24h"}).json()["users"]
        assert [(u["username"], u["runs_waiting"], u["gpu_hours"]) for u in own] == [
            (member, 1, 0.0)
        ]
        assert mine.get("/api/fleet", params={"window": "1y"}).status_code == 422

        for run_id in (waiting, idle, busy):
            assert api.post(f"/api/runs/{run_id}/cancel").status_code in (200, 202)

        def ended(run_id: int) -> bool:
            return bool(api.get(f"/api/runs/{run_id}").json()["status"] == "cancelled")

        wait_until(lambda: ended(idle) and ended(busy), 60, "both runs cancelled")

        # The runs table: the final figures, sorted and filtered.
        final = {r: api.get(f"/api/runs/{r}").json() for r in (idle, busy)}
        assert final[idle]["summary"][UTIL_MEAN]["last"] == 0.0, final[idle]["summary"]
        assert final[busy]["summary"][UTIL_MEAN]["last"] == BUSY
        assert final[busy]["summary"][UTIL_P95]["last"] == BUSY
        assert final[busy]["summary"][MEM_PEAK]["last"] == nvml_standin.memory_used(1) / 2**20
        assert listed(api, exp, sort=f"-summary.{UTIL_MEAN}.last") == [busy, idle]
        assert listed(api, exp, sort=f"summary.{UTIL_MEAN}.last") == [idle, busy]
        assert listed(api, exp, sort=f"-summary.{UTIL_P95}.last") == [busy, idle]
        assert listed(api, exp, filter=f"{UTIL_P95}>50") == [busy]
        assert listed(api, exp, filter=f"{UTIL_MEAN}<1") == [idle]

        # The Fleet numbers of the finished runs, from their own records (read again until
        # no sample lands between the two reads of the series: the last may follow the end).
        def samples() -> dict[int, int]:
            found = {}
            for run_id, gpu in ((idle, 0), (busy, 1)):
                key = f"sys/gpu{gpu}/util"
                got = api.get(f"/api/runs/{run_id}/metrics", params={"keys": key}).json()
                found[run_id] = len(got["series"][key]["value"])
            return found

        def fleet_row() -> dict[str, Any] | None:
            before = samples()
            fleet = api.get("/api/fleet", params={"window": "24h"}).json()
            return (
                {"counts": before, **{u["username"]: u for u in fleet["users"]}[owner]}
                if samples() == before
                else None
            )

        row: dict[str, Any] | None = None

        def settled() -> bool:
            nonlocal row
            row = fleet_row()
            return row is not None

        wait_until(settled, 30, "the runs' GPU samples settled")
        assert row is not None
        counts = row["counts"]
        assert row["gpu_hours"] == pytest.approx(hours(final[idle]) + hours(final[busy]), abs=2e-4)
        assert row["idle_gpu_hours"] == pytest.approx(hours(final[idle]), abs=2e-4)
        expected = BUSY * counts[busy] / (counts[idle] + counts[busy])
        assert row["util_mean"] == pytest.approx(expected, abs=0.01)
        assert row["gpu_runs"] == 2 and row["runs_waiting"] == 0

        # The CLI: the same row, as a table and as the API's JSON.
        token = owner_auth["Authorization"].removeprefix("Bearer ")
        argv = ["fleet", "--window", "24h", "--server", stack.base_url, "--token", token]
        shown = subprocess.run(
            [str(Path(sys.executable).parent / "torchyard"), *argv],
            env={**os.environ, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert owner in shown.stdout and "IDLE GPU-HOURS" in shown.stdout, shown.stdout
