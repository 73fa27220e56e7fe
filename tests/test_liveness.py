"""A worker that dies or shuts down never leaves a run "running", loses no point, and with
max_restarts hands the run to the next worker, which resumes it from its last checkpoint; a
cancel while the run's environment builds stops the build within 5 s.

A stack of its own (database, data dir, broker) so its reaper, on a short limit, never sees
the runs other tests build by hand: real uvicorn server, real Celery workers, real torch jobs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.gpus.models import GpuLease
from tests.code_archives import tar_gz
from tests.conftest import BASE_DIR, DATABASE_URL, processes_in
from tests.databases import own_database, user_with_token
from tests.factories import spooled_points
from tests.stack import (
    free_port,
    own_broker_url,
    purge_broker,
    start_logged,
    stop_process,
    wait_healthy,
)
from tests.stalling_index import stalling_index
from tests.waits import holds_for, wait_for
from torchyard.compose.processes import server_argv, worker_argv
from worker.file_lock import flock
from worker.snapshots import LOCKS, Snapshots

pytestmark = pytest.mark.slow

LOST_AFTER = 6.0
ROOT = BASE_DIR / "liveness"
DATA_DIR = ROOT / "data"
# Its own broker: the pass's test Redis database, not a fixed number another pass may use.
BROKER = own_broker_url(ROOT / "broker.db")
FINISHED = {"succeeded", "failed", "cancelled"}


class Stack:
    def __init__(self, env: dict[str, str], api: httpx.Client, engine: Engine) -> None:
        self.env = env
        self.api = api
        self.engine = engine
        self.workers: list[subprocess.Popen] = []

    def start_server(self, port: int, **extra: str) -> None:
        self.port = port
        env = {**self.env, **extra}
        self.server = start_logged(server_argv("127.0.0.1", port), env, ROOT / "server.log")
        wait_healthy(f"http://127.0.0.1:{port}", self.server, ROOT / "server.log")

    def start_worker(self, **extra: str) -> subprocess.Popen:
        """A new worker, the only one: one left by an earlier test would take this test's runs."""
        for worker in self.workers:
            stop_process(worker)
        log = ROOT / f"worker-{len(self.workers)}.log"
        worker = start_logged(worker_argv(2), {**self.env, **extra}, log)
        self.workers.append(worker)
        return worker


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    ROOT.mkdir(parents=True, exist_ok=True)
    kind = "postgresql" if DATABASE_URL.startswith("postgresql") else "sqlite"
    with own_database(kind, ROOT, "liveness") as engine:
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
            TORCHYARD_DB_IDLE_TRANSACTION_SECONDS="3",  # below the lost limit (app.settings)
            TORCHYARD_SHUTDOWN_GRACE_SECONDS="1",
            TORCHYARD_FAKE_GPUS="0",
            TORCHYARD_WORKER_HOST="box-a",
            PYTHONUNBUFFERED="1",
        )
        purge_broker(BROKER)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        stack = Stack(env, api, engine)
        try:
            stack.start_server(port)
            yield stack
        finally:
            api.close()
            for worker in stack.workers:
                stop_process(worker)
            stop_process(stack.server)


def submit(api: httpx.Client, *, max_restarts: int, epochs: int = 4, steps: int = 25) -> int:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": epochs, "steps_per_epoch": steps, "step_sleep": 0.06},
        "seed": 3,
        "resources": {"gpus": 1},
        "max_restarts": max_restarts,
    }
    exp = api.post("/api/experiments", json={"name": "live", "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs")
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def wait_until(api: httpx.Client, run_id: int, ok, timeout: float = 120) -> dict:
    """The run as the API shows it, once `ok` holds for it."""
    seen: list[dict] = [{}]

    def reached() -> dict | None:
        seen[0] = api.get(f"/api/runs/{run_id}").json()
        return seen[0] if ok(seen[0]) else None

    return wait_for(reached, timeout=timeout, every=0.2, what=lambda: f"run {run_id}: {seen[0]}")


def status_of(api: httpx.Client, run_id: int) -> str:
    return str(api.get(f"/api/runs/{run_id}").json()["status"])


def not_lost(api: httpx.Client, run_id: int) -> bool:
    """Running, or ended as its job did once the job is gone: the status is read first, so a
    status other than running means its job had ended already."""
    return status_of(api, run_id) == "running" or not job_pids(run_id)


def job_pids(run_id: int) -> list[int]:
    """The run's job's processes, its keeper included (tests/conftest.py processes_in)."""
    return processes_in(DATA_DIR / "runs" / str(run_id))


def stored(api: httpx.Client, run_id: int) -> dict[str, dict]:
    return api.get(f"/api/runs/{run_id}/metrics").json()["series"]


def kill_worker(worker: subprocess.Popen) -> float:
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    return time.monotonic()


def test_a_killed_workers_run_ends_as_its_job_did_with_every_spooled_point_kept(stack) -> None:
    """No worker comes back. The job trains on (worker.keeper): while it does, the run is not
    lost (the reaper on its host sees it alive: the host's next worker would re-adopt it).
    Once it ended with nobody to watch it, the API's reaper moves every spooled point and
    ends the run as its job did (the keeper wrote its exit status)."""
    worker = stack.start_worker()
    run_id = submit(stack.api, max_restarts=0, epochs=8)
    wait_until(stack.api, run_id, lambda r: r["status"] == "running", timeout=90)
    wait_until(stack.api, run_id, lambda r: stored(stack.api, run_id).get("train/loss"))
    kill_worker(worker)
    assert job_pids(run_id), "the job trains on after its worker's death (worker.keeper)"
    # Past the limit, but while its job trains on it is not lost.
    holds_for(lambda: not_lost(stack.api, run_id), LOST_AFTER + 2, what="lost while training")

    run = wait_until(stack.api, run_id, lambda r: r["status"] in FINISHED, timeout=90)
    assert job_pids(run_id) == []
    assert run["status"] == "succeeded" and run["error"] is None, run
    assert run["exit_code"] == 0 and run["attempt"] == 1, run
    # Every point that reached the spool is in the database (the API moved the rest); the
    # worker's own system series (sys/) never were in the spool.
    series = stored(stack.api, run_id)
    assert (
        sum(len(s["step"]) for k, s in series.items() if not k.startswith("sys/"))
        == spooled_points(DATA_DIR / "runs" / str(run_id))
        > 0
    )
    with Session(stack.engine) as session:  # its GPU lease is free
        assert session.scalars(select(GpuLease).where(GpuLease.run_id == run_id)).all() == []


def test_with_max_restarts_a_killed_workers_run_resumes_on_the_next_worker(stack) -> None:
    worker = stack.start_worker()
    epochs, steps = 4, 25
    run_id = submit(stack.api, max_restarts=1, epochs=epochs, steps=steps)
    # Killed after its second checkpoint, in the middle of the third epoch.
    wait_until(
        stack.api,
        run_id,
        lambda r: len(stack.api.get(f"/api/runs/{run_id}/checkpoints").json()) >= 2,
        timeout=120,
    )
    wait_until(
        stack.api,
        run_id,
        lambda r: max(stored(stack.api, run_id).get("train/loss", {}).get("step", [0])) > 2 * steps,
    )
    kill_worker(worker)
    for pid in job_pids(run_id):  # the job dies too (a crash of the whole process tree)
        with contextlib.suppress(ProcessLookupError):  # gone with the keeper
            os.kill(pid, signal.SIGKILL)
    requeued = wait_until(stack.api, run_id, lambda r: r["attempt"] == 2, timeout=60)
    assert requeued["status"] == "queued", requeued
    assert "worker lost" in requeued["error"] and requeued["resume_from"].endswith(".pt")

    stack.start_worker()
    run = wait_until(stack.api, run_id, lambda r: r["status"] in FINISHED, timeout=120)
    assert run["status"] == "succeeded", run
    assert run["attempt"] == 2
    loss = stored(stack.api, run_id)["train/loss"]
    assert loss["step"] == list(range(1, epochs * steps + 1))  # continuous, no point twice
    ckpts = [c["name"] for c in stack.api.get(f"/api/runs/{run_id}/checkpoints").json()]
    assert "final.pt" in ckpts
    logs = stack.api.get(f"/api/runs/{run_id}/logs").text
    assert "resuming from" in logs


KEEP_NO_JOBS = {"TORCHYARD_KEEP_JOBS_ON_WORKER_STOP": "false"}


def test_a_warm_shutdown_requeues_a_run_that_may_restart_and_fails_one_that_may_not(
    stack,
) -> None:
    """With keep_jobs_on_worker_stop off: the grace, then the job is stopped."""
    worker = stack.start_worker(**KEEP_NO_JOBS)
    keep = submit(stack.api, max_restarts=1, epochs=3, steps=40)
    wait_until(
        stack.api,
        keep,
        lambda r: len(stack.api.get(f"/api/runs/{keep}/checkpoints").json()) >= 1,
        timeout=120,
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) is not None  # the grace is 1 s: it stops the job, then exits
    run = stack.api.get(f"/api/runs/{keep}").json()
    assert run["status"] == "queued" and run["attempt"] == 2, run
    assert "worker shut down" in run["error"]
    assert job_pids(keep) == []

    stack.start_worker(**KEEP_NO_JOBS)
    done = wait_until(stack.api, keep, lambda r: r["status"] in FINISHED, timeout=120)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    assert stored(stack.api, keep)["train/loss"]["step"] == list(range(1, 3 * 40 + 1))

    worker = stack.workers[-1]
    lose = submit(stack.api, max_restarts=0, epochs=3, steps=40)
    wait_until(stack.api, lose, lambda r: r["status"] == "running", timeout=90)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=60)
    run = stack.api.get(f"/api/runs/{lose}").json()
    assert run["status"] == "failed" and "worker shut down" in run["error"], run


def wait_for_checkpoints(stack: Stack, run_id: int, count: int) -> None:
    wait_until(
        stack.api,
        run_id,
        lambda r: len(stack.api.get(f"/api/runs/{run_id}/checkpoints").json()) >= count,
        timeout=120,
    )


def assert_trained_through(
    stack: Stack, run_id: int, *, attempt: int, steps: int, timeout: float = 120
) -> None:
    run = wait_until(stack.api, run_id, lambda r: r["status"] in FINISHED, timeout=timeout)
    assert run["status"] == "succeeded" and run["attempt"] == attempt, run
    loss = stored(stack.api, run_id)["train/loss"]
    assert loss["step"] == list(range(1, steps + 1))  # continuous, no point twice
    assert job_pids(run_id) == []


def read_stream(
    stack: Stack, run_id: int, last_id: str | None, steps: list[int], stop_after: int | None
) -> str | None:
    """Read the run's SSE stream into `steps` until it ends (or `stop_after` steps arrived);
    returns the id of the last event read."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    with stack.api.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as stream:
        event: dict[str, str] = {}
        for line in stream.iter_lines():
            if line:
                name, _, value = line.partition(":")
                event[name] = value.removeprefix(" ")
                continue
            if event.get("event") == "metrics":
                series = json.loads(event["data"])["series"]
                steps.extend(series.get("train/loss", {}).get("step", []))
            last_id = event.get("id", last_id)
            event = {}
            if stop_after is not None and len(steps) >= stop_after:
                return last_id
    return last_id


def test_an_api_restart_stops_no_run_and_viewers_resume_with_last_event_id(stack) -> None:
    stack.start_worker()
    run_id = submit(stack.api, max_restarts=0, epochs=3, steps=40)
    wait_until(stack.api, run_id, lambda r: r["status"] == "running", timeout=90)
    steps: list[int] = []
    last_id = read_stream(stack, run_id, None, steps, stop_after=10)
    assert last_id and steps

    stop_process(stack.server)  # the API goes away while the run trains
    spool = DATA_DIR / "runs" / str(run_id)
    before = spooled_points(spool)
    wait_for(lambda: spooled_points(spool) > before + 5, timeout=30, what="points while away")
    stack.start_server(stack.port)

    read_stream(stack, run_id, last_id, steps, stop_after=None)  # until the run's stream ends
    run = stack.api.get(f"/api/runs/{run_id}").json()
    assert run["status"] == "succeeded", run
    assert steps == list(range(1, 3 * 40 + 1))  # exactly the missed points, none twice
    assert stored(stack.api, run_id)["train/loss"]["step"] == steps


def test_a_run_waiting_for_its_snapshot_to_unpack_keeps_heartbeating(stack) -> None:
    """Issue 37: unpacking an allowed 1 GB snapshot kept a claimed run from heartbeating for
    62 s, and the reaper failed it ("worker lost"). Here the snapshot's unpack lock is held
    (as another run's unpack of the same snapshot holds it) for three times run_lost_seconds:
    the run stays running, then runs its script once the lock is free."""
    stack.start_worker()
    data = tar_gz([("hold.py", "file", b"print('UNPACKED AND RAN', flush=True)\n")])
    up = stack.api.post("/api/code", files={"file": ("code.tar.gz", data)})
    assert up.status_code == 201, up.text
    digest = up.json()["digest"]
    snapshots = Snapshots(DATA_DIR / "snapshots", 0)
    (DATA_DIR / "snapshots" / LOCKS).mkdir(parents=True, exist_ok=True)
    unpack_lock = snapshots._lock(snapshots.path(digest).name, "unpack")
    with flock(unpack_lock, fcntl.LOCK_EX):
        config = {"script": "hold.py", "code": digest}
        exp = stack.api.post("/api/experiments", json={"name": "unpack", "config": config})
        assert exp.status_code == 201, exp.text
        run = stack.api.post(f"/api/experiments/{exp.json()['id']}/runs").json()
        wait_until(stack.api, run["id"], lambda r: r["status"] == "running")
        holds_for(
            lambda: status_of(stack.api, run["id"]) == "running",
            3 * LOST_AFTER,
            what=lambda: str(stack.api.get(f"/api/runs/{run['id']}").json()),
        )
    done = wait_until(stack.api, run["id"], lambda r: r["status"] in FINISHED)
    assert done["status"] == "succeeded", done
    assert "UNPACKED AND RAN" in stack.api.get(f"/api/runs/{run['id']}/logs").text


def pip_tree(package: str) -> list[psutil.Process]:
    """Every pip process installing `package` on this machine, and every process below it."""
    found: list[psutil.Process] = []
    for process in psutil.process_iter(["cmdline"]):
        argv = process.info["cmdline"] or []
        if "pip" in argv and package in argv:
            with contextlib.suppress(psutil.NoSuchProcess):
                found += [process, *process.children(recursive=True)]
    return found


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_cancel_during_an_environment_build_stops_it_within_5_s(stack) -> None:
    """Issue 38: the build runs under the supervision loop every job has (worker/supervision.py).
    A real worker's pip, stuck downloading a wheel from an index that never finishes it, is
    cancelled: within 5 s of the request every process of the build is gone and the run is
    cancelled."""
    package = "torchyard-stalling-wheel"
    with stalling_index(package) as index:
        worker = stack.start_worker(PIP_INDEX_URL=index.url)
        config = {
            "recipe": "tiny_mlp",
            "params": {"epochs": 1},
            "environment": {"requirements": [package]},
        }
        exp = stack.api.post("/api/experiments", json={"name": "stalls", "config": config})
        assert exp.status_code == 201, exp.text
        run_id = stack.api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
        assert index.downloading.wait(timeout=180), (ROOT / "worker-0.log").read_text()[-3000:]
        tree = pip_tree(package)
        assert tree and worker.poll() is None
        assert status_of(stack.api, run_id) == "running"
        t0 = time.monotonic()
        assert stack.api.post(f"/api/runs/{run_id}/cancel").status_code == 202
        wait_for(
            lambda: not any(alive(p) for p in tree) and status_of(stack.api, run_id) == "cancelled",
            timeout=30,
            every=0.05,
            what=lambda: f"{[p for p in tree if alive(p)]}, {status_of(stack.api, run_id)}",
        )
        took = time.monotonic() - t0
    print(f"cancel -> the build's processes gone and the run cancelled: {took:.2f} s")
    assert took < 5
    assert pip_tree(package) == []


def test_a_run_that_needs_no_build_starts_while_two_others_build(stack) -> None:
    """Issue 39: two runs building a 1,296 s environment held both slots of a worker, and a
    run that needed no build waited 20+ minutes. Builds hold no run slot now (worker.slots):
    on a worker with two slots, two runs whose pip is stuck on a wheel that never finishes
    downloading build on, and a run that needs no environment starts and ends meanwhile."""
    package = "torchyard-stalling-wheel"
    with stalling_index(package) as index:
        stack.start_worker(PIP_INDEX_URL=index.url)
        config = {
            "recipe": "tiny_mlp",
            "params": {"epochs": 1},
            "resources": {"gpus": 0},
            "environment": {"requirements": [package]},
        }
        exp = stack.api.post("/api/experiments", json={"name": "builds", "config": config})
        assert exp.status_code == 201, exp.text
        builds = [
            stack.api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
            for _ in range(2)
        ]
        assert index.downloading.wait(timeout=180), (ROOT / "worker-0.log").read_text()[-3000:]
        for run_id in builds:  # both claimed: one in pip, one waiting for the same build
            wait_until(stack.api, run_id, lambda r: r["status"] == "running", timeout=60)
        quick = submit(stack.api, max_restarts=0, epochs=1, steps=5)
        done = wait_until(stack.api, quick, lambda r: r["status"] in FINISHED, timeout=120)
        assert done["status"] == "succeeded", done
        assert [status_of(stack.api, run_id) for run_id in builds] == ["running"] * 2
        for run_id in builds:
            assert stack.api.post(f"/api/runs/{run_id}/cancel").status_code == 202
        for run_id in builds:
            wait_until(stack.api, run_id, lambda r: r["status"] == "cancelled", timeout=60)
    wait_for(lambda: pip_tree(package) == [], timeout=30, what="the builds' pip processes gone")


# A worker's start takes seconds on a loaded box: the re-adoption tests give the reapers (the
# API's, the new worker's) the production patience, so the run is re-adopted, not reaped.
PATIENT = {"TORCHYARD_RUN_LOST_SECONDS": "60"}


def server_with(stack: Stack, **settings: str) -> Iterator[Stack]:
    """The stack's API started again with `settings` for one test, then as it was."""
    stop_process(stack.server)
    stack.start_server(stack.port, **settings)
    try:
        yield stack
    finally:
        stop_process(stack.server)
        stack.start_server(stack.port)


@pytest.fixture
def remote_api(stack: Stack) -> Iterator[Stack]:
    """The API on another machine (a host name of its own): it cannot see box-a's jobs, so
    its reaper hands a silent run over however alive its job is (the team stack's API)."""
    yield from server_with(stack, TORCHYARD_WORKER_HOST="box-api")


# The team stack's scenario; the calls it makes on either database: tests/test_lifecycle.py.
def test_a_worker_back_after_its_run_was_requeued_re_adopts_its_living_job(
    remote_api: Stack,
) -> None:
    """Issue 39: a restart slower than run_lost_seconds found its runs requeued, and about 45
    steps a run were redone. Back run_lost_seconds + 20 s after its kill -9, the worker finds
    the job training on and the run still queued (no other attempt started): it takes the run
    back as the same attempt, and every step is stored once."""
    stack = remote_api
    worker = stack.start_worker()
    run_id = submit(stack.api, max_restarts=1, epochs=8, steps=100)
    wait_until(stack.api, run_id, lambda r: stored(stack.api, run_id).get("train/loss"))
    killed = kill_worker(worker)
    requeued = wait_until(stack.api, run_id, lambda r: r["attempt"] == 2, timeout=60)
    assert requeued["status"] == "queued" and "worker lost" in requeued["error"], requeued
    away = killed + LOST_AFTER + 20 - time.monotonic()
    holds_for(lambda: bool(job_pids(run_id)), away, what="the job trains on, no worker")
    assert status_of(stack.api, run_id) == "queued"

    stack.start_worker()
    back = wait_until(stack.api, run_id, lambda r: r["status"] != "queued", timeout=120)
    assert back["attempt"] == 1 and "withdrawn" in back["error"], back
    assert_trained_through(stack, run_id, attempt=1, steps=8 * 100, timeout=300)


# One patient server for the re-adoption tests, last in the module: started once, not again
# before and after each of them (two server starts a test, on the pass that runs them).
@pytest.fixture(scope="module")
def patient(stack: Stack) -> Iterator[Stack]:
    yield from server_with(stack, **PATIENT)


# On the embedded stack: test_cli_up's Ctrl-C and `up` again mid-run.
def test_a_stopped_worker_leaves_its_job_training_and_the_next_one_re_adopts_it(
    stack: Stack,
) -> None:
    """Even when the worker is away longer than run_lost_seconds (an upgrade): the run is not
    lost while its job trains, and if the job ended meanwhile it ends as the job did."""
    worker = stack.start_worker()
    run_id = submit(stack.api, max_restarts=0, epochs=6, steps=40)
    wait_until(stack.api, run_id, lambda r: stored(stack.api, run_id).get("train/loss"))
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)  # at once: nothing to wait for, the job trains on
    assert job_pids(run_id)
    left = stack.api.get(f"/api/runs/{run_id}").json()
    assert left["status"] == "running" and left["attempt"] == 1, left
    # It trains on while no worker watches, past the limit: not lost (still running, or, if
    # the job ended meanwhile, ended as its job did).
    holds_for(lambda: not_lost(stack.api, run_id), LOST_AFTER + 2, what="lost while training")
    assert status_of(stack.api, run_id) in ("running", "succeeded")

    stack.start_worker()
    assert_trained_through(stack, run_id, attempt=1, steps=6 * 40)
    assert stack.api.get(f"/api/runs/{run_id}").json()["error"] is None


# On the embedded stack: test_cli_up's killed worker started again by `up`.
def test_a_worker_killed_and_restarted_in_time_re_adopts_its_job(patient: Stack) -> None:
    stack = patient
    worker = stack.start_worker(**PATIENT)
    run_id = submit(stack.api, max_restarts=0, epochs=5, steps=40)
    wait_until(stack.api, run_id, lambda r: stored(stack.api, run_id).get("train/loss"))
    kill_worker(worker)
    assert job_pids(run_id)
    stack.start_worker(**PATIENT)
    assert_trained_through(stack, run_id, attempt=1, steps=5 * 40)


# The same lifecycle calls on either stack; the broker only carries the requeued task.
def test_a_job_gone_with_its_host_is_requeued_from_its_newest_checkpoint(patient: Stack) -> None:
    """A reboot (or a recreated container) takes the job: the record the worker left names a
    keeper that is gone, without an exit status. The run had no restarts left, but it has a
    checkpoint: it resumes from it (requeue_after_host_restart)."""
    stack = patient
    worker = stack.start_worker(**PATIENT)
    run_id = submit(stack.api, max_restarts=0, epochs=4, steps=40)
    wait_for_checkpoints(stack, run_id, 1)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    for pid in job_pids(run_id):  # the "reboot": every process of the job, keeper first
        with contextlib.suppress(ProcessLookupError):  # gone with the keeper
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not job_pids(run_id), timeout=10, what=f"run {run_id}'s processes gone")

    stack.start_worker(**PATIENT)
    requeued = wait_until(stack.api, run_id, lambda r: r["attempt"] == 2, timeout=60)
    assert "host restarted" in requeued["error"] and requeued["resume_from"].endswith(".pt")
    assert_trained_through(stack, run_id, attempt=2, steps=4 * 40)
