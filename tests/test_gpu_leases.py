"""GPU leases end to end: real server, real Celery workers with fake GPU inventories, real
torch jobs (on CPU). Everything is judged from what the runs recorded: which GPUs they got
(CUDA_VISIBLE_DEVICES) and when they held them (started_at .. finished_at is exactly the
lease: taken in the transaction that starts the run, released in the one that finishes it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.db import session_scope
from app.gpus.models import GpuLease
from app.timeutil import as_utc
from tests import nvml_standin
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, pids_of_run, wait_for_status
from tests.stack import (
    LiveStack,
    free_port,
    own_broker_url,
    purge_broker,
    start_logged,
    stop_process,
    wait_for_hosts,
    wait_healthy,
)
from torchyard.compose.processes import server_argv, worker_argv

pytestmark = pytest.mark.slow

# Short, so the kill -9 test is quick; long enough that a loaded CI box never misses a beat.
LEASE_TTL = 5.0
# This module's own broker, so the suite's shared worker (no GPUs) never takes these tasks.
GPU_BROKER_URL = own_broker_url(BASE_DIR / "gpu-broker.db")
LOG_DIR = BASE_DIR / "logs-gpus"


def stack_env(**extra: str) -> dict[str, str]:
    # NVML's stand-in: the fake GPUs have stats, so runs record GPU series on CPU.
    return dict(
        os.environ,
        TORCHYARD_BROKER_URL=GPU_BROKER_URL,
        TORCHYARD_LEASE_TTL_SECONDS=str(LEASE_TTL),
        TORCHYARD_RUN_HEARTBEAT_SECONDS="1",  # below the TTL (app.settings)
        TORCHYARD_NVML_MODULE=str(Path(nvml_standin.__file__)),
        TORCHYARD_SYSTEM_METRICS_INTERVAL_SECONDS="1",
        PYTHONUNBUFFERED="1",
        **extra,
    )


def start_worker(host: str, gpus: str) -> subprocess.Popen:
    env = stack_env(TORCHYARD_WORKER_HOST=host, TORCHYARD_FAKE_GPUS=gpus)
    # GPUs + 1 threads: what `torchyard worker` takes for this inventory.
    concurrency = len(gpus.split(",")) + 1
    return start_logged(worker_argv(concurrency), env, LOG_DIR / f"worker-{host}.log")


class GpuStack:
    def __init__(self, live: LiveStack) -> None:
        self.live = live
        self.workers: dict[str, subprocess.Popen] = {}

    def add_worker(self, host: str, gpus: str) -> subprocess.Popen:
        """Started, and live (heartbeated): a run asking for more GPUs than the live hosts have
        is refused, so a test asks for this host's GPUs only once the host is live."""
        since = time.monotonic()
        self.workers[host] = start_worker(host, gpus)
        wait_for_hosts((host,), since)
        return self.workers[host]


@pytest.fixture(scope="module")
def gpu_stack(database: str) -> Iterator[GpuStack]:
    purge_broker(GPU_BROKER_URL)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_logged(server_argv("127.0.0.1", port), stack_env(), LOG_DIR / "server.log")
    stack = GpuStack(LiveStack(f"http://127.0.0.1:{port}", LOG_DIR, ADMIN_PASSWORD))
    try:
        wait_healthy(stack.live.base_url, server, LOG_DIR / "server.log")
        stack.add_worker("gpu-a", "0,1")
        yield stack
    finally:
        stop_process(server)
        for worker in stack.workers.values():
            stop_process(worker)


@pytest.fixture(scope="module")
def api(gpu_stack: GpuStack) -> Iterator[httpx.Client]:
    with gpu_stack.live.admin_client() as client:
        yield client


def submit(api: httpx.Client, name: str, gpus: int, steps: int, step_sleep: float) -> int:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": steps, "step_sleep": step_sleep},
        "resources": {"gpus": gpus, "nproc": 1},
    }
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def finished(api: httpx.Client, run_id: int, timeout: float = 180) -> dict:
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=timeout)
    assert run["status"] == "succeeded", run
    return run


def when(run: dict, key: str) -> datetime:
    return as_utc(datetime.fromisoformat(run[key]))


def gpus_of(run: dict) -> set[tuple[str, int]]:
    return {(run["worker_host"], int(i)) for i in run["gpu_indices"].split(",") if i}


def assert_no_gpu_held_twice(runs: list[dict]) -> None:
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            shared = gpus_of(a) & gpus_of(b)
            overlap = when(a, "started_at") < when(b, "finished_at") and when(
                b, "started_at"
            ) < when(a, "finished_at")
            assert not (shared and overlap), f"runs {a['id']} and {b['id']} both held {shared}"


def leases_of(run_ids: list[int]) -> list[GpuLease]:
    with session_scope() as session:
        return list(session.scalars(select(GpuLease).where(GpuLease.run_id.in_(run_ids))))


def job_env(run_id: int, name: str) -> str | None:
    for pid in pids_of_run(run_id):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in environ:
            key, _, value = entry.decode(errors="replace").partition("=")
            if key == name:
                return value
    return None


def wait_running(api: httpx.Client, run_id: int, timeout: float = 60) -> dict:
    return wait_for_status(api, run_id, {"running"}, timeout=timeout)


def test_2_1_1_2_runs_never_share_a_gpu_start_in_order_and_backfill(api) -> None:
    # a: 2 GPUs; b: 1, short; c: 1, long; d: 2; e: 1 (submitted after d, backfills past it).
    plan = [("a", 2, 20, 0.1), ("b", 1, 2, 0.1), ("c", 1, 60, 0.2), ("d", 2, 2, 0.1)]
    plan.append(("e", 1, 2, 0.1))
    ids = {name: submit(api, f"gpu-{name}", g, steps, sleep) for name, g, steps, sleep in plan}

    wait_running(api, ids["a"])
    deadline = time.monotonic() + 30
    while (seen := job_env(ids["a"], "CUDA_VISIBLE_DEVICES")) is None:
        assert time.monotonic() < deadline, "run a's job never showed up"
        time.sleep(0.1)
    assert seen == "0,1"  # what the job really got, not only what was recorded

    runs = {name: finished(api, run_id) for name, run_id in ids.items()}
    a, b, c, d, e = (runs[n] for n in "abcde")
    assert a["gpu_indices"] == "0,1" and d["gpu_indices"] == "0,1"
    assert {b["gpu_indices"], c["gpu_indices"]} == {"0", "1"}
    assert e["gpu_indices"] == b["gpu_indices"]  # b's GPU, the first to come free
    assert {r["worker_host"] for r in runs.values()} == {"gpu-a"}
    assert_no_gpu_held_twice(list(runs.values()))

    # Order: a first (it was first and fit); b and c only once a let go of both GPUs.
    assert when(a, "finished_at") <= min(when(b, "started_at"), when(c, "started_at"))
    # Backfill: e (1 GPU) started while d (2 GPUs, ahead of it) could not fit, i.e. while c
    # still held the other GPU; d started only once c and e were done.
    assert when(e, "started_at") < when(c, "finished_at")
    assert when(e, "started_at") < when(d, "started_at")
    assert when(d, "started_at") >= max(when(c, "finished_at"), when(e, "finished_at"))
    # Scheduling latency: each run started soon after the GPUs it needed came free.
    assert when(e, "started_at") - when(b, "finished_at") < timedelta(seconds=5)
    assert leases_of(list(ids.values())) == []
    # System series (tests/test_system_metrics.py): each leased GPU's, from NVML's stand-in.
    assert_gpu_series(api, a, (0, 1))
    assert_gpu_series(api, c, (int(c["gpu_indices"]),))


def assert_gpu_series(api: httpx.Client, run: dict, indices: tuple[int, ...]) -> None:
    """The run recorded util, memory and power of exactly its leased GPUs, as NVML said."""
    gpu_keys = {k for k in run["summary"] if k.startswith("sys/gpu")}
    assert gpu_keys == {f"sys/gpu{i}/{w}" for i in indices for w in ("util", "mem_mb", "power_w")}
    wanted = ",".join(sorted(gpu_keys))
    series = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": wanted}).json()["series"]
    for i in indices:
        assert set(series[f"sys/gpu{i}/util"]["value"]) == {nvml_standin.utilization(i)}
        assert set(series[f"sys/gpu{i}/mem_mb"]["value"]) == {(i + 1) * 1024.0}
        assert set(series[f"sys/gpu{i}/power_w"]["value"]) == {nvml_standin.power_mw(i) / 1000}
        assert len(series[f"sys/gpu{i}/util"]["step"]) >= 2  # a run of seconds, every second


def test_a_killed_workers_job_gone_too_its_host_frees_its_leases_when_it_comes_back(
    gpu_stack: GpuStack, api
) -> None:
    """The worker and its job were killed (as a reboot would): the host's next worker finds
    the job's record naming a keeper that is gone (worker.adoption), ends the run as a host
    restart (no checkpoint yet: failed) and its leases with it, at once."""
    doomed = submit(api, "gpu-doomed", 2, 1000, 0.2)
    wait_running(api, doomed)
    held = leases_of([doomed])
    assert sorted((lease.host, lease.gpu_index) for lease in held) == [("gpu-a", 0), ("gpu-a", 1)]

    gpu_stack.workers["gpu-a"].send_signal(signal.SIGKILL)
    gpu_stack.workers["gpu-a"].wait()
    for pid in pids_of_run(doomed):  # the orphaned job: not what this test is about
        with contextlib.suppress(ProcessLookupError):  # gone with the keeper
            os.kill(pid, signal.SIGKILL)
    assert len(leases_of([doomed])) == 2  # nobody released them: the worker is gone
    gpu_stack.add_worker("gpu-a", "0,1")  # the same host comes back

    after = submit(api, "gpu-after", 2, 2, 0.0)
    done = finished(api, after)
    assert done["gpu_indices"] == "0,1" and done["worker_host"] == "gpu-a"
    assert leases_of([doomed, after]) == []
    lost = api.get(f"/api/runs/{doomed}").json()
    assert lost["status"] == "failed" and "host restarted" in lost["error"], lost


def test_two_hosts_share_the_queue_and_a_2_gpu_run_never_straddles_them(
    gpu_stack: GpuStack, api
) -> None:
    gpu_stack.add_worker("gpu-b", "0,1")
    small = [submit(api, f"gpu-spread-{i}", 1, 25, 0.2) for i in range(3)]
    big = submit(api, "gpu-big", 2, 2, 0.0)
    runs = [finished(api, run_id) for run_id in [*small, big]]
    assert {r["worker_host"] for r in runs[:3]} == {"gpu-a", "gpu-b"}
    big_run = runs[3]
    assert len(gpus_of(big_run)) == 2  # two GPUs of one host: worker_host is one host
    assert_no_gpu_held_twice(runs)
    # Three 1-GPU runs on 2 + 2 GPUs leave no host with two free: the big run had to wait.
    assert when(big_run, "started_at") >= min(when(r, "finished_at") for r in runs[:3])
    assert leases_of([*small, big]) == []
