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
    .venv/bin/python bench/mlflow_ingest_cpu.py --before DIR [--points 30000] [--repeats 6]

Prints each round's CPU ms per 1,000 points and points/s by the wall clock, then the medians
and the load average. With ``--before DIR`` (a tree of the code before a change, e.g. from
``git archive OLD | tar -x -C DIR``), two servers run at once, that code's and this one's, and
are fed each round's batches alternately, one request each in turn, so both see the same load
on a shared box: each round's CPU per 1,000 points of both, and the ratio (before / after).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import orjson  # noqa: E402

import tests.own_server  # noqa: E402
from tests.own_server import OwnServer, own_server  # noqa: E402
from tests.stack import start_logged, stop_process  # noqa: E402
from torchyard.compose.processes import PACKAGE_ROOT  # noqa: E402

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


def _new_run(http: httpx.Client) -> str:
    experiment = http.post(f"{M}/experiments/create", json={"name": f"cpu-{time.time_ns()}"})
    experiment.raise_for_status()
    run = http.post(f"{M}/runs/create", json={"experiment_id": experiment.json()["experiment_id"]})
    run.raise_for_status()
    return str(run.json()["run"]["info"]["run_id"])


def _server_of(code: Path, directory: Path) -> OwnServer:
    """tests.own_server's server, run from the tree `code` (its --app-dir and PYTHONPATH)."""

    def start_from(argv: list[str], env: dict[str, str], log: Path) -> Any:
        argv = [str(code) if a == str(PACKAGE_ROOT) else a for a in argv]
        return start_logged(argv, env | {"PYTHONPATH": str(code)}, log)

    directory.mkdir()
    server = OwnServer(directory)
    # Swapped where OwnServer looks it up (a name tests.own_server imports, not exports).
    own = vars(tests.own_server)
    own["start_logged"] = start_from
    try:
        server.start()
    finally:
        own["start_logged"] = start_logged
    return server


def compare(before: Path, points: int, keys: int, repeats: int) -> None:
    """Both servers at once, fed alternately (module docstring)."""
    load_before = os.getloadavg()
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-cpu-") as tmp:
        servers = [
            _server_of(before, Path(tmp) / "before"),
            _server_of(PACKAGE_ROOT, Path(tmp) / "after"),
        ]
        try:
            clients = []
            for server in servers:
                headers = server.user("bench")[1]
                clients.append(httpx.Client(base_url=server.base_url, headers=headers, timeout=120))
            json_type = {"Content-Type": "application/json"}
            for i in range(repeats + 1):  # round 0: warm-up (imports, caches)
                size = 10 * BATCH if i == 0 else points
                batches = [bodies(_new_run(http), size, keys) for http in clients]
                cpu = [0.0, 0.0]
                for pair in zip(*batches, strict=True):
                    for side, (http, server) in enumerate(zip(clients, servers, strict=True)):
                        assert server.proc is not None
                        start = cpu_seconds(server.proc.pid)
                        url = f"{M}/runs/log-batch"
                        http.post(url, content=pair[side], headers=json_type).raise_for_status()
                        cpu[side] += cpu_seconds(server.proc.pid) - start
                if i:
                    old, new = (c * 1000 / (size / 1000) for c in cpu)
                    ratios.append(old / new)
                    print(
                        f"round {i}: before {old:.2f}, after {new:.2f} CPU ms / 1,000 points, "
                        f"ratio {old / new:.2f}"
                    )
            for http in clients:
                http.close()
        finally:
            for server in servers:
                if server.proc is not None:
                    stop_process(server.proc)
                server.engine.dispose()
    load_after = os.getloadavg()
    print(
        f"median ratio (before / after): {statistics.median(ratios):.2f} (range "
        f"{min(ratios):.2f}-{max(ratios):.2f}); load average {load_before[0]:.1f} -> "
        f"{load_after[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", type=Path, help="a tree of the code before: compare")
    args = parser.parse_args()
    if args.before is not None:
        compare(args.before.resolve(), args.points, args.keys, args.repeats)
        return
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
