"""The server's own CPU cost of MLflow log-batch ingestion: CPU seconds of the torchyard
server process per 1,000 points, the figure a loaded box does not bend.

bench/mlflow_api.py compares points/s with MLflow's server; on a box shared with other work
both wall-clock rates move with the load (MLflow's the most), while the CPU time the server
process spends per batch is its own work alone. The loop is bench/mlflow_api.py's HTTP one:
batches of 1,000 metrics (--keys keys x 1,000/keys steps) into one run, one request after the
other, the bodies encoded before the clock starts (the client's share is not the server's).
The server is tests/own_server.py's (uvicorn, SQLite, no worker); its CPU time (user +
system, all threads) is read from /proc/<pid>/stat around each round.

    .venv/bin/python bench/mlflow_ingest_cpu.py [--points 100000] [--keys 10] [--repeats 5]

Prints each round's CPU ms per 1,000 points and points/s by the wall clock, then the medians
and the load average.
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

import httpx  # noqa: E402
import orjson  # noqa: E402

from tests.own_server import own_server  # noqa: E402

BATCH = 1000
M = "/api/2.0/mlflow"
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process, all its threads (/proc/<pid>/stat 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def bodies(run_id: str, points: int, keys: int) -> list[bytes]:
    """bench/mlflow_api.py's raw_ingest batches, as JSON bytes (timestamps in ms, as the
    client sends them)."""
    steps = BATCH // keys
    now = int(time.time() * 1000)
    return [
        orjson.dumps(
            {
                "run_id": run_id,
                "metrics": [
                    {"key": f"m{k}", "value": 1.0 / (1 + s + k), "timestamp": now + s, "step": s}
                    for s in range(start, start + steps)
                    for k in range(keys)
                ],
            }
        )
        for start in range(0, points // keys, steps)
    ]


def one_round(http: httpx.Client, pid: int, points: int, keys: int) -> tuple[float, float]:
    """(server CPU ms per 1,000 points, points/s by the wall clock) of one run's batches."""
    experiment = http.post(f"{M}/experiments/create", json={"name": f"cpu-{time.time_ns()}"})
    experiment.raise_for_status()
    run = http.post(f"{M}/runs/create", json={"experiment_id": experiment.json()["experiment_id"]})
    run.raise_for_status()
    batches = bodies(run.json()["run"]["info"]["run_id"], points, keys)
    headers = {"Content-Type": "application/json"}
    cpu, wall = cpu_seconds(pid), time.perf_counter()
    for body in batches:
        http.post(f"{M}/runs/log-batch", content=body, headers=headers).raise_for_status()
    wall, cpu = time.perf_counter() - wall, cpu_seconds(pid) - cpu
    sent = len(batches) * BATCH
    return cpu * 1000 / (sent / 1000), sent / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="bench-mlflow-cpu-") as tmp,
        own_server(Path(tmp)) as ty,
    ):
        _password, headers = ty.user("bench")
        assert ty.proc is not None
        with httpx.Client(base_url=ty.base_url, headers=headers, timeout=120) as http:
            one_round(http, ty.proc.pid, 10 * BATCH, args.keys)  # warm-up: imports, caches
            cpus, rates = [], []
            for i in range(args.repeats):
                cpu, rate = one_round(http, ty.proc.pid, args.points, args.keys)
                cpus.append(cpu)
                rates.append(rate)
                print(f"round {i + 1}: {cpu:.2f} CPU ms / 1,000 points, {rate:,.0f} points/s")
    load_after = os.getloadavg()
    print(
        f"median: {statistics.median(cpus):.2f} CPU ms of the server per 1,000 points "
        f"(range {min(cpus):.2f}-{max(cpus):.2f}), {statistics.median(rates):,.0f} points/s "
        f"wall; load average {load_before[0]:.1f} -> {load_after[0]:.1f}"
    )


if __name__ == "__main__":
    main()
