"""Fencing by attempt end to end (issue 27's acceptance): a worker frozen with SIGSTOP for
2x run_lost_seconds while its run trains has the run requeued under it; once resumed it stops
the old attempt's job within 5 s, stores nothing more of it, and the run ends succeeded with
each step once, all from the new attempt. No GPU is held by two jobs at any sample (the
jobs' own CUDA_VISIBLE_DEVICES, read from /proc).

The liveness tests' stack (tests/test_liveness.py), its API on another host's name: its
reaper decides from the database alone, as one on another GPU host does (on the job's own
host the reaper would see the job training and wait for its worker).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.metrics.models import Metric, MetricKey
from tests.conftest import BASE_DIR, DATABASE_URL, WORKSPACE_DIR
from tests.databases import own_database, user_with_token
from tests.freezing import freeze
from tests.stack import REPO, free_port, own_broker_url, purge_broker, stop_process
from tests.test_liveness import FINISHED, LOST_AFTER, Stack, wait_until
from tests.test_liveness import ROOT as STACK_LOGS
from tests.waits import holds_for, wait_for
from torchyard.contract import JOB_TOKEN_VAR

pytestmark = pytest.mark.slow

STEPS = 400  # 0.06 s each: the job outlives the freeze
ROOT = BASE_DIR / "fencing"
DATA_DIR = ROOT / "data"
CHAOS_SCRIPT = REPO / "tests" / "workspace_scripts" / "chaos_steps.py"
# Its own broker: the pass's test Redis database, not a fixed number another pass may use.
BROKER = own_broker_url(ROOT / "broker.db")


def jobs_of(run_id: int) -> dict[str, set[str]]:
    """The run's live processes' job token -> the GPUs they see (CUDA_VISIBLE_DEVICES)."""
    marker = f"TORCHYARD_RUN_DIR={DATA_DIR / 'runs' / str(run_id)}"
    jobs: dict[str, set[str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry.name}/environ").read_bytes().decode(errors="replace")
            state = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        env = dict(item.partition("=")[::2] for item in raw.split("\0") if item)
        if f"TORCHYARD_RUN_DIR={env.get('TORCHYARD_RUN_DIR')}" != marker:
            continue
        if state[0] in (b"Z", b"X"):
            continue
        gpus = {g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g}
        jobs.setdefault(env.get(JOB_TOKEN_VAR, "?"), set()).update(gpus)
    return jobs


class Sampler:
    """Every 0.1 s: which job holds which GPU; any GPU seen under two jobs is kept."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.samples = 0
        self.shared: list[dict[str, set[str]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.wait(0.1):
            jobs = jobs_of(self.run_id)
            self.samples += 1
            gpus = [g for held in jobs.values() for g in held]
            if len(gpus) != len(set(gpus)):
                self.shared.append(jobs)

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def remote_reaper() -> Iterator[Stack]:
    """The liveness tests' stack in a database and data dir of its own, on a short limit."""
    # Each test's runs count from 1 in a new database: the last test's run dirs must not be
    # taken for theirs (its spool ingested into this test's run 1).
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    ROOT.mkdir(parents=True, exist_ok=True)
    STACK_LOGS.mkdir(parents=True, exist_ok=True)  # Stack's processes log there
    kind = "postgresql" if DATABASE_URL.startswith("postgresql") else "sqlite"
    with own_database(kind, ROOT, f"fencing_{os.getpid()}_{secrets.token_hex(3)}") as engine:
        token = user_with_token(engine, "alice")
        env = dict(
            os.environ,
            TORCHYARD_DATABASE_URL=engine.url.render_as_string(hide_password=False),
            TORCHYARD_DATA_DIR=str(DATA_DIR),
            TORCHYARD_BROKER_URL=BROKER,
            TORCHYARD_REAP_INTERVAL_SECONDS="1",
            TORCHYARD_RUN_LOST_SECONDS=str(LOST_AFTER),
            TORCHYARD_RUN_HEARTBEAT_SECONDS="1",
            TORCHYARD_LEASE_TTL_SECONDS="5",
            TORCHYARD_FAKE_GPUS="0",
            TORCHYARD_WORKER_HOST="box-a",
            # Below run_lost_seconds, as the setting says: a worker frozen inside a transaction
            # holds the run's row lock, and the reaper's requeue waits for it until PostgreSQL
            # ends that session (30 s by default: the job's whole life here, so the old
            # attempt had ended by itself before the hold below; seen once in CI). On SQLite
            # the tests freeze the worker between its transactions (tests/freezing.py).
            TORCHYARD_DB_IDLE_TRANSACTION_SECONDS="3",
            PYTHONUNBUFFERED="1",
        )
        purge_broker(BROKER)
        port = free_port()
        headers = {"Authorization": f"Bearer {token}"}
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30)
        stack = Stack(env, api, engine)
        try:
            stack.start_server(port, TORCHYARD_WORKER_HOST="api-host")
            yield stack
        finally:
            api.close()
            for worker in stack.workers:
                stop_process(worker)
            stop_process(stack.server)


def test_a_frozen_workers_reaped_attempt_is_fenced_when_it_resumes(remote_reaper: Stack) -> None:
    live = remote_reaper
    worker = live.start_worker()
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": STEPS, "step_sleep": 0.06},
        "seed": 3,
        "resources": {"gpus": 1},
        "max_restarts": 1,
    }
    exp = live.api.post("/api/experiments", json={"name": "fenced", "config": config})
    assert exp.status_code == 201, exp.text
    run_id = int(live.api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"])
    with Sampler(run_id) as sampler:
        wait_for(lambda: jobs_of(run_id), timeout=90, what="the job started")
        (old_token,) = jobs_of(run_id)
        freeze(worker, live.env["TORCHYARD_DATABASE_URL"])
        try:
            requeued = wait_until(live.api, run_id, lambda r: r["attempt"] == 2, timeout=60)
            assert requeued["status"] == "queued", requeued
            # The rest of 2x run_lost_seconds frozen: the old attempt's job trains on.
            holds_for(
                lambda: old_token in jobs_of(run_id),
                LOST_AFTER,
                what="the old attempt's job trains on while its worker is frozen",
            )
        finally:
            worker.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
        wait_for(
            lambda: old_token not in jobs_of(run_id),
            timeout=5,
            every=0.05,
            what="no process of the old attempt left within 5 s of resuming",
        )
        gone_after = time.monotonic() - resumed
        run = wait_until(live.api, run_id, lambda r: r["status"] in FINISHED, timeout=180)
    assert run["status"] == "succeeded" and run["attempt"] == 2, run
    assert sampler.samples > 50 and sampler.shared == [], sampler.shared[:3]
    started = datetime.fromisoformat(run["started_at"]).timestamp()
    with Session(live.engine) as session:
        points = session.execute(
            select(Metric.step, Metric.wall_time)
            .join(MetricKey, MetricKey.id == Metric.key_id)
            .where(MetricKey.run_id == run_id, MetricKey.key == "train/loss")
            .order_by(Metric.step)
        ).all()
    assert [step for step, _ in points] == list(range(1, STEPS + 1))  # each step once
    assert min(wall for _, wall in points) >= started - 1  # all of attempt 2
    print(f"old attempt gone {gone_after:.2f} s after SIGCONT; {sampler.samples} samples")


def test_jobs_that_exit_while_their_worker_is_frozen_end_their_runs_as_they_exited(
    remote_reaper: Stack,
) -> None:
    """Two jobs end (exit 0) while their worker is frozen past run_lost_seconds: the reaper,
    which cannot see them, fails their runs "worker lost"; once the worker resumes it knows
    how they exited, and the runs end succeeded with every step
    (app.runs.state.lifecycle.settle)."""
    live = remote_reaper
    (WORKSPACE_DIR / "chaos").mkdir(parents=True, exist_ok=True)
    shutil.copy(CHAOS_SCRIPT, WORKSPACE_DIR / "chaos" / CHAOS_SCRIPT.name)
    worker = live.start_worker()
    config = {
        "script": f"chaos/{CHAOS_SCRIPT.name}",
        "params": {"steps": 60, "step_sleep": 0.1},
        "max_restarts": 0,
    }
    exp = live.api.post("/api/experiments", json={"name": "exits", "config": config})
    assert exp.status_code == 201, exp.text
    ids = [int(live.api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"])]
    ids.append(int(live.api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]))
    wait_for(lambda: all(jobs_of(r) for r in ids), timeout=90, what="both jobs started")
    freeze(worker, live.env["TORCHYARD_DATABASE_URL"])
    try:
        for run_id in ids:
            lost = wait_until(live.api, run_id, lambda r: r["status"] != "running", timeout=60)
            assert lost["status"] == "failed" and lost["error"].startswith("worker lost"), lost
        wait_for(lambda: not any(jobs_of(r) for r in ids), timeout=60, what="both jobs exited")
    finally:
        worker.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    for run_id in ids:
        run = wait_until(live.api, run_id, lambda r: r["status"] == "succeeded", timeout=30)
        assert run["exit_code"] == 0 and run["error"] is None, run
        got = live.api.get(f"/api/runs/{run_id}/metrics", params={"keys": "chaos/step"}).json()
        assert got["series"]["chaos/step"]["step"] == list(range(1, 61)), run_id
    took = time.monotonic() - resumed
    print(f"both runs settled as their jobs exited {took:.1f} s after SIGCONT")
