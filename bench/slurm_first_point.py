"""Submit to first point: a Slurm pool against the local pool, on one machine in one run.

Starts a private Slurm cluster (tests/slurm_cluster.py: munged, slurmctld, one slurmd with two
fake GPUs), a real API, a process worker of the `local` pool and a Slurm worker of pool
`cluster` (TORCHYARD_WORKER_EXECUTOR=slurm, its data folder the shared folder), all on one
SQLite database and SQLite broker in a temporary folder. Then, alternating the pools, it
launches the same tiny_mlp run N times on each and times each from the POST until GET
/api/runs/{id}/metrics returns its first `train/loss` point; each run ends before the next.
Prints each time, the medians and their ratio (Slurm / local).

    TORCHYARD_JOB_UID_BASE=720000 .venv/bin/python bench/slurm_first_point.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KEY = "train/loss"
POOLS = ("local", "cluster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="torchyard-bench-slurm-"))
    data_dir.chmod(0o755)  # the Slurm job reads the run folders in it
    password = "bench-password"
    os.environ.update(
        TORCHYARD_DATA_DIR=str(data_dir),
        TORCHYARD_ADMIN_PASSWORD=password,
        TORCHYARD_BROKER_URL=f"sqla+sqlite:///{data_dir / 'broker.db'}",
        TORCHYARD_WORKER_HOST="bench-local",
        PYTHONUNBUFFERED="1",
    )
    for var in ("TORCHYARD_DATABASE_URL", "TORCHYARD_FAKE_GPUS"):
        os.environ.pop(var, None)

    from app.prestart import prestart
    from tests.slurm_cluster import SlurmCluster
    from tests.stack import running_stack, start_logged, stop_process, wait_for_hosts
    from torchyard.compose.processes import worker_argv

    prestart()
    logs = data_dir / "logs"
    times: dict[str, list[float]] = {pool: [] for pool in POOLS}
    with SlurmCluster() as cluster:
        env = dict(cluster.env)
        slurm_env = dict(
            env,
            TORCHYARD_WORKER_EXECUTOR="slurm",
            TORCHYARD_WORKER_POOL="cluster",
            TORCHYARD_WORKER_HOST="bench-submit",
            TORCHYARD_SLURM_PARTITION=cluster.partition,
            TORCHYARD_SLURM_SHARED_DIR=str(data_dir),
        )
        with running_stack(env, logs, admin_password=password) as stack:
            since = time.monotonic()
            slurm_worker = start_logged(worker_argv(2), slurm_env, logs / "worker-slurm.log")
            try:
                wait_for_hosts(("bench-local", "bench-submit"), since)
                api = stack.admin_client()
                for i in range(args.repeats):
                    for pool in POOLS:
                        took = first_point(api, pool)
                        times[pool].append(took)
                        print(f"{pool} #{i + 1}: POST -> first point {took:.2f} s", flush=True)
            finally:
                stop_process(slurm_worker)
    local, slurm = (statistics.median(times[pool]) for pool in POOLS)
    print(
        f"submit -> first point, median of {args.repeats}: local {local:.2f} s, "
        f"Slurm {slurm:.2f} s, ratio {slurm / local:.1f}x "
        f"(max local {max(times['local']):.2f} s, Slurm {max(times['cluster']):.2f} s); "
        f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs",
        flush=True,
    )


def first_point(api: object, pool: str) -> float:
    """One run on `pool`: seconds from its POST to its first point through the API; returns
    once the run ended."""
    import httpx

    assert isinstance(api, httpx.Client)
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": 20},
        # Within the private node (4 CPUs, 4000 MB): the same for both pools.
        "resources": {"gpus": 0, "nproc": 1, "cpus": 1, "memory_gb": 1.5, "pool": pool},
    }
    exp = api.post("/api/experiments", json={"name": f"bench-{pool}", "config": config})
    exp.raise_for_status()
    t0 = time.perf_counter()
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    run.raise_for_status()
    run_id = run.json()["id"]
    deadline = t0 + 300
    while not api.get(f"/api/runs/{run_id}/metrics", params={"keys": KEY}).json()["series"]:
        status = api.get(f"/api/runs/{run_id}").json()
        if status["status"] in ("failed", "cancelled") or time.perf_counter() > deadline:
            raise SystemExit(f"run {run_id} on {pool} gave no point: {status}")
        time.sleep(0.02)
    took = time.perf_counter() - t0
    while api.get(f"/api/runs/{run_id}").json()["status"] in ("queued", "running"):
        time.sleep(0.1)
    return took


if __name__ == "__main__":
    main()
