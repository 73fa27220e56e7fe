"""Launch latency on the embedded stack: from POST /runs to the run's first metric row.

Starts a real server and a real Celery worker (SQLite database, SQLite broker) in a temporary
data dir, launches tiny_mlp runs one after another and times each from the POST until the
metrics API returns the first point. Target: < 5 s on CPU.

    .venv/bin/python bench/launch_latency.py [--runs 5]
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

TARGET_SECONDS = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="torchyard-bench-"))
    password = "bench-password"
    os.environ.update(TORCHYARD_DATA_DIR=str(data_dir), TORCHYARD_ADMIN_PASSWORD=password)
    for var in ("TORCHYARD_DATABASE_URL", "TORCHYARD_BROKER_URL"):
        os.environ.pop(var, None)

    from app.prestart import prestart
    from tests.stack import running_stack

    prestart()
    latencies = []
    with running_stack(dict(os.environ), data_dir / "logs", admin_password=password) as stack:
        api = stack.admin_client()
        config = {"recipe": "tiny_mlp", "params": {"epochs": 1, "steps_per_epoch": 50}}
        exp = api.post("/api/experiments", json={"name": "bench", "config": config}).json()
        for i in range(args.runs):
            t0 = time.perf_counter()
            run = api.post(f"/api/experiments/{exp['id']}/runs", json={}).json()
            while True:
                series = api.get(f"/api/runs/{run['id']}/metrics").json()["series"]
                if series:
                    break
                time.sleep(0.02)
            latency = time.perf_counter() - t0
            latencies.append(latency)
            print(f"run {i + 1}: POST -> first metric row {latency:.2f} s", flush=True)
            while api.get(f"/api/runs/{run['id']}").json()["status"] in ("queued", "running"):
                time.sleep(0.1)
    median = statistics.median(latencies)
    print(
        f"launch latency: median {median:.2f} s, max {max(latencies):.2f} s over "
        f"{len(latencies)} runs; target < {TARGET_SECONDS:.0f} s; "
        f"ratio median/target {median / TARGET_SECONDS:.2f}"
    )


if __name__ == "__main__":
    main()
