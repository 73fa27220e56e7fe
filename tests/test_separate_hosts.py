"""Two worker "hosts" that share nothing but the database, the Redis broker and the artifact
store: each has its own data dir, host name and GPU inventory, and the API server a data dir
of its own. Runs go to both; every run's metrics, logs (all and by rank, and over SSE) and
checkpoints come through the one API; a run of host A resumes on host B from the store. The
API's data dir stays without a single run directory: nothing is read from a shared disk.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import torch
from sqlalchemy import select

from app.db import session_scope
from app.runs.models import Checkpoint
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, WORKSPACE_DIR, wait_for_status
from tests.stack import (
    LiveStack,
    free_port,
    start_logged,
    stop_process,
    wait_for_hosts,
    wait_healthy,
)
from torchyard.compose.processes import server_argv, worker_argv

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
ROOT = BASE_DIR / "separate-hosts"
HOSTS = ("box-a", "box-b")
SCRIPTS = Path(__file__).parent / "workspace_scripts"
LEASE_TTL = 6.0  # host heartbeats every 2 s, so both hosts are seen soon after they start


@dataclass
class Hosts:
    api: httpx.Client
    api_dir: Path
    store: Path
    data_dirs: dict[str, Path]
    workers: dict[str, subprocess.Popen]
    runs: dict[str, dict] = field(default_factory=dict)


def purge(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()  # this test's own database number: stale tasks go


def env_for(data_dir: Path, store: Path, **extra: str) -> dict[str, str]:
    return dict(
        os.environ,
        TORCHYARD_DATA_DIR=str(data_dir),
        TORCHYARD_BROKER_URL=REDIS_URL,
        TORCHYARD_ARTIFACT_STORE=str(store),
        TORCHYARD_LEASE_TTL_SECONDS=str(LEASE_TTL),
        PYTHONUNBUFFERED="1",
        **extra,
    )


@pytest.fixture(scope="module")
def hosts(database: str) -> Iterator[Hosts]:
    purge(REDIS_URL)
    logs, store, api_dir = ROOT / "logs", ROOT / "store", ROOT / "api-data"
    for d in (logs, store, api_dir):
        d.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    workers: dict[str, subprocess.Popen] = {}
    data_dirs = {host: ROOT / f"{host}-data" for host in HOSTS}
    port = free_port()
    server = start_logged(
        server_argv("127.0.0.1", port), env_for(api_dir, store), logs / "server.log"
    )
    try:
        for host in HOSTS:
            env = env_for(
                data_dirs[host], store, TORCHYARD_WORKER_HOST=host, TORCHYARD_FAKE_GPUS="0"
            )
            workers[host] = start_logged(worker_argv(2), env, logs / f"worker-{host}.log")
        base_url = f"http://127.0.0.1:{port}"
        wait_healthy(base_url, server, logs / "server.log")
        wait_for_hosts(HOSTS, t0)
        with LiveStack(base_url, logs, ADMIN_PASSWORD).admin_client() as api:
            yield Hosts(api, api_dir, store, data_dirs, workers)
    finally:
        stop_process(server)
        for worker in workers.values():
            stop_process(worker)


TINY = {"epochs": 2, "steps_per_epoch": 10, "step_sleep": 0.15}


def submit(api: httpx.Client, name: str, resources: dict, params: dict | None = None) -> dict:
    config = {"recipe": "tiny_mlp", "params": params or TINY, "seed": 5, "resources": resources}
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return dict(run.json())


def succeeded(api: httpx.Client, run_id: int) -> dict:
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=90)
    if run["status"] != "succeeded":
        tail = api.get(f"/api/runs/{run_id}/logs", params={"tail": 30}).text
        pytest.fail(f"run {run_id} {run['status']}: {run.get('error')!r}\nlog tail:\n{tail}")
    return run


@pytest.fixture(scope="module")
def runs(hosts: Hosts) -> dict[str, dict]:
    """Two 1-GPU runs (one GPU per host: while one trains, the other must go to the other
    host) and a 2-process DDP run on CPU."""
    submitted = {
        "gpu-1": submit(hosts.api, "hosts-gpu-1", {"gpus": 1, "nproc": 1}),
        "gpu-2": submit(hosts.api, "hosts-gpu-2", {"gpus": 1, "nproc": 1}),
        "ddp": submit(
            hosts.api, "hosts-ddp", {"gpus": 0, "nproc": 2}, {"epochs": 1, "steps_per_epoch": 10}
        ),
    }
    hosts.runs = {name: succeeded(hosts.api, run["id"]) for name, run in submitted.items()}
    return hosts.runs


def test_runs_spread_over_both_hosts_each_keeping_its_own_run_dirs(
    hosts: Hosts, runs: dict[str, dict]
) -> None:
    assert {runs["gpu-1"]["worker_host"], runs["gpu-2"]["worker_host"]} == set(HOSTS)
    for run in runs.values():
        here = hosts.data_dirs[run["worker_host"]] / "runs" / str(run["id"])
        assert (here / "output.log").is_file()
        for other in set(HOSTS) - {run["worker_host"]}:
            assert not (hosts.data_dirs[other] / "runs" / str(run["id"])).exists()


def test_metrics_and_logs_of_every_run_come_through_the_api(
    hosts: Hosts, runs: dict[str, dict]
) -> None:
    api = hosts.api
    for name, run in runs.items():
        series = api.get(f"/api/runs/{run['id']}/metrics").json()["series"]
        steps = 10 * (1 if name == "ddp" else 2)
        assert series["train/loss"]["step"] == list(range(1, steps + 1)), name
        assert series["val/acc"]["step"] == list(range(10, steps + 1, 10)), name
        r = api.get(f"/api/runs/{run['id']}/logs")
        on_disk = hosts.data_dirs[run["worker_host"]] / "runs" / str(run["id"]) / "output.log"
        assert r.text == on_disk.read_text(), name  # every byte, the last line included
        assert r.headers["x-log-size"] == str(on_disk.stat().st_size)
        assert f"run {run['id']} finished" in r.text
        tail = api.get(f"/api/runs/{run['id']}/logs", params={"tail": 200}).text
        assert tail == r.text[-200:]
    ddp = runs["ddp"]["id"]
    for rank in (0, 1):
        lines = api.get(f"/api/runs/{ddp}/logs", params={"rank": rank}).text.splitlines()
        assert lines and all(line.startswith(f"[rank{rank}]: ") for line in lines)
    rank0 = api.get(f"/api/runs/{ddp}/logs", params={"rank": 0}).text
    assert "epoch 1/1 step 10" in rank0


def test_sse_delivers_the_log_and_points_of_runs_from_both_hosts(
    hosts: Hosts, runs: dict[str, dict]
) -> None:
    for name in ("gpu-1", "gpu-2"):
        run_id = runs[name]["id"]
        text, steps, statuses, event = "", [], [], None
        with hosts.api.stream("GET", f"/api/runs/{run_id}/events", timeout=30) as stream:
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    if event == "log":
                        text += data["text"]
                    elif event == "metrics" and "train/loss" in data["series"]:
                        steps += data["series"]["train/loss"]["step"]
                    elif event == "status":
                        statuses.append(data["status"])
        assert text == hosts.api.get(f"/api/runs/{run_id}/logs").text, name
        assert "epoch 2/2 step 20" in text
        assert steps == list(range(1, 21)) and statuses == ["succeeded"]


def test_checkpoints_of_both_hosts_are_in_the_store_and_download(
    hosts: Hosts, runs: dict[str, dict]
) -> None:
    for name in ("gpu-1", "gpu-2"):
        run_id = runs[name]["id"]
        listed = hosts.api.get(f"/api/runs/{run_id}/checkpoints").json()
        assert [c["name"] for c in listed] == ["epoch-0001.pt", "epoch-0002.pt", "final.pt"]
        for ckpt in listed:
            r = hosts.api.get(f"/api/runs/{run_id}/checkpoints/{ckpt['name']}")
            assert r.status_code == 200, r.text
            assert len(r.content) == ckpt["size_bytes"]
            state = torch.load(io.BytesIO(r.content), weights_only=True)
            assert {"model", "optimizer", "epoch", "step"} <= set(state)
            stored = hosts.store / "runs" / str(run_id) / "checkpoints" / ckpt["name"]
            assert stored.read_bytes() == r.content
        with session_scope() as session:
            uris = session.scalars(select(Checkpoint.uri).where(Checkpoint.run_id == run_id))
            assert all(uri and uri.startswith("file://") for uri in uris)


def test_a_run_of_host_a_resumes_on_host_b_from_the_store(
    hosts: Hosts, runs: dict[str, dict]
) -> None:
    source = next(r for r in (runs["gpu-1"], runs["gpu-2"]) if r["worker_host"] == "box-a")
    stop_process(hosts.workers["box-a"])  # host A is gone: only B can take the resumed run
    b_copy = hosts.data_dirs["box-b"] / "runs" / str(source["id"]) / "checkpoints"
    assert not b_copy.exists()

    r = hosts.api.post(f"/api/runs/{source['id']}/resume", json={"checkpoint": "epoch-0001.pt"})
    assert r.status_code == 201, r.text
    resumed = succeeded(hosts.api, r.json()["id"])
    assert resumed["worker_host"] == "box-b"
    assert (b_copy / "epoch-0001.pt").is_file()  # fetched from the store by B

    def series(run_id: int) -> dict:
        return dict(hosts.api.get(f"/api/runs/{run_id}/metrics").json()["series"])

    a, b = series(source["id"]), series(resumed["id"])
    assert b["train/loss"]["step"] == list(range(11, 21))
    assert b["train/loss"]["value"] == pytest.approx(a["train/loss"]["value"][10:], rel=1e-5)
    assert b["val/acc"]["value"] == pytest.approx(a["val/acc"]["value"][1:], rel=1e-5)
    logs = hosts.api.get(f"/api/runs/{resumed['id']}/logs").text
    assert f"run {resumed['id']} finished" in logs
    final = hosts.api.get(f"/api/runs/{resumed['id']}/checkpoints/final.pt")
    assert torch.load(io.BytesIO(final.content), weights_only=True)["step"] == 20


def test_files_a_script_wrote_on_a_worker_host_are_listed_and_served_by_the_api(
    hosts: Hosts,
) -> None:
    folder = WORKSPACE_DIR / "hosts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "writes.py").write_text(
        "import os\n"
        "os.makedirs('checkpoint-3', exist_ok=True)\n"
        "open('checkpoint-3/weights.bin', 'wb').write(bytes(range(256)) * 40)\n"
        "open('model.pt', 'wb').write(b'model bytes')\n"
    )
    config = {"script": "hosts/writes.py", "seed": 1}
    exp = hosts.api.post("/api/experiments", json={"name": "hosts-files", "config": config})
    run = hosts.api.post(f"/api/experiments/{exp.json()['id']}/runs", json={}).json()
    done = succeeded(hosts.api, run["id"])
    assert not (hosts.api_dir / "runs" / str(run["id"])).exists()
    listed = hosts.api.get(f"/api/runs/{run['id']}/files").json()
    assert [f["path"] for f in listed] == ["checkpoint-3/weights.bin", "model.pt"]
    got = hosts.api.get(f"/api/runs/{run['id']}/files/checkpoint-3/weights.bin")
    assert got.status_code == 200 and got.content == bytes(range(256)) * 40
    assert hosts.api.get(f"/api/runs/{run['id']}/files/model.pt").content == b"model bytes"
    log = hosts.api.get(f"/api/runs/{run['id']}/logs").text
    assert "2 files of the run's working directory" in log, (done["worker_host"], log[-2000:])


def test_tensorboard_images_and_hparams_from_a_worker_host_come_through_the_api(
    hosts: Hosts,
) -> None:
    folder = WORKSPACE_DIR / "hosts"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPTS / "tensorboard_media.py", folder / "media.py")
    config = {"script": "hosts/media.py", "params": {"steps": 2, "lr": 0.5}, "seed": 1}
    exp = hosts.api.post("/api/experiments", json={"name": "hosts-media", "config": config})
    run = hosts.api.post(f"/api/experiments/{exp.json()['id']}/runs", json={}).json()
    done = succeeded(hosts.api, run["id"])
    assert not (hosts.api_dir / "runs" / str(run["id"])).exists()
    assert done["params"]["hparams.lr"] == 0.5 and done["params"]["params.lr"] == 0.5
    tags = hosts.api.get(f"/api/runs/{run['id']}/images").json()["tags"]
    assert [i["step"] for i in tags["samples"]] == [0, 1]
    got = hosts.api.get(f"/api/runs/{run['id']}/images/{tags['samples'][-1]['id']}")
    assert got.status_code == 200 and got.content.startswith(b"\x89PNG\r\n\x1a\n")


def test_the_api_data_dir_holds_no_run_directory(hosts: Hosts, runs: dict[str, dict]) -> None:
    runs_dir = hosts.api_dir / "runs"
    assert not runs_dir.exists() or not any(runs_dir.iterdir())
