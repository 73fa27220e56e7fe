"""The API under a CPU hog: request latency p50/p99, dropped requests and the time to answer
after a SIGTERM, for the serving path of issue 39 (`torchyard serve`: one supervisor, N
servers on one socket, a warmed spare) against the compose api before it (`uvicorn
--workers N`), in the same run, on the same box, under the same hog.

Each stack in turn: a fresh SQLite database, the API started through its real command, then
10 busy loops per core at normal nice (processes of this script, outside torchyard), 4 event
streams open on a run, and 4 clients sending --requests GETs and --submissions run
submissions (POST /api/experiments with its run). Half-way through, every server process of
the stack gets SIGTERM (uvicorn's workers / our servers); the first answer to a request sent
after it says when the service answered again. Dropped: a request that got no HTTP answer
(a reset, a cut connection).

    .venv/bin/python bench/api_cpu_hog.py [--requests 200] [--submissions 20] [--processes 4]
        [--stack both|serve|uvicorn]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from app.auth.service import create_user, issue_token  # noqa: E402
from app.db import make_engine  # noqa: E402
from tests.databases import sqlite_at_head  # noqa: E402
from tests.stack import free_port  # noqa: E402
from tests.test_cli_up import _children  # noqa: E402
from tests.test_standby import Stream  # noqa: E402
from tests.test_supervisor_cpu_hog import (  # noqa: E402
    CONFIG,
    HOGS,
    Load,
    Output,
    cpu_hog,
    listening,
    runnable,
)
from tests.waits import wait_for  # noqa: E402


def command(stack: str, port: int, processes: int) -> list[str]:
    if stack == "uvicorn":  # docker-compose.yml's api command before issue 39
        return [
            sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(processes),
            "--no-proxy-headers", "--timeout-graceful-shutdown", "3",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "torchyard.cli", "serve", "--port", str(port),
        "--processes", str(processes),
    ]  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def measure(stack: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    url = f"sqlite:///{folder / 'api.db'}"
    sqlite_at_head(folder / "api.db")
    engine = make_engine(url)
    with Session(engine) as session:
        user = create_user(session, username="hog", password="pw-hog-1234567", role="member")
        headers = {"Authorization": f"Bearer {issue_token(session, user=user, ttl_hours=1)}"}
        session.commit()
    engine.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")} | {
        "TORCHYARD_DATA_DIR": str(folder / "data"),
        "TORCHYARD_DATABASE_URL": url,
        "TORCHYARD_BROKER_URL": "memory://",
        "TORCHYARD_REAP_INTERVAL_SECONDS": "0",
        # As compose sets it for either (`torchyard serve` makes one of its own otherwise).
        "PROMETHEUS_MULTIPROC_DIR": str(folder / "prometheus"),
    }
    (folder / "prometheus").mkdir()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    output = Output.of(command(stack, port, args.processes), env)
    proc = output.proc
    try:
        ready = "spare server is ready" if stack == "serve" else "Application startup complete"
        wait_for(
            lambda: (
                sum(ready in line for line in output.lines)
                >= (1 if stack == "serve" else args.processes)
            ),
            timeout=300,
            what=lambda: f"{stack} ready: {output.lines[-20:]}",
        )
        with httpx.Client(base_url=base, headers=headers, timeout=120) as api:
            first = api.post("/api/experiments", json={"name": "s", "config": CONFIG, "run": {}})
            first.raise_for_status()
        run_id, exp_id = int(first.json()["run"]["id"]), int(first.json()["id"])
        servers = listening(proc.pid, port) if stack == "serve" else _children(proc.pid)
        with cpu_hog(HOGS):
            wait_for(lambda: runnable() >= HOGS, timeout=60, what=f"{HOGS} runnable")
            streams = [Stream(f"{base}/api/runs/{run_id}/events", headers) for _ in range(4)]
            for stream in streams:
                stream.start()
            loads = [
                Load(base, headers, args.requests // 4, args.submissions // 4) for _ in range(4)
            ]
            began = time.monotonic()
            for load in loads:
                load.run_id, load.exp_id = run_id, exp_id
                load.start()
            queue = [runnable()]

            def half_done() -> bool:
                queue.append(runnable())
                return sum(x.done for x in loads) >= args.requests // 2

            wait_for(
                half_done,
                timeout=600,
                every=0.2,
                what="half the requests answered",
            )
            stopped_at = time.monotonic()
            for pid in servers:
                os.kill(pid, signal.SIGTERM)
            for load in loads:
                load.join(timeout=900)
            # The first answer to a request sent after the SIGTERM (a probe if none was sent).
            after = [d for x in loads for s, d in x.answered if s >= stopped_at]
            if not after:
                with httpx.Client(base_url=base, headers=headers, timeout=300) as probe:
                    probe.get("/api/health")
                after = [time.monotonic()]
            answered = min(after) - stopped_at
            took = time.monotonic() - began
        seconds = [s for load in loads for s in load.seconds]
        pairs = [(s, d) for load in loads for s, d in load.answered]
        before = [d - s for s, d in pairs if d < stopped_at]
        waits = [d - s for s, d in pairs if s >= stopped_at]
        statuses = [s for load in loads for s in load.statuses]
        errors = [e for load in loads for e in load.errors]
        cut_streams = sum(not any("retry: 1000" in line for line in s.lines) for s in streams)
        return {
            "stack": stack,
            "answers": len(statuses),
            "dropped": len(errors),
            "5xx": sum(s >= 500 for s in statuses),
            "p50_ms": 1000 * percentile(seconds, 0.5),
            "p99_ms": 1000 * percentile(seconds, 0.99),
            "mean_ms": 1000 * statistics.fmean(seconds) if seconds else float("nan"),
            "p50_before_sigterm_ms": 1000 * percentile(before, 0.5),
            "p99_before_sigterm_ms": 1000 * percentile(before, 0.99),
            "longest_wait_after_sigterm_s": max(waits, default=float("nan")),
            "answered_after_sigterm_s": answered,
            "streams_without_hint": cut_streams,
            "killed": sum("was not ready in time" in line for line in output.lines),
            "runnable": f"{min(queue)}-{max(queue)}",
            "seconds": took,
            "errors": errors[:3],
        }
    finally:
        output.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--stack", choices=["both", "serve", "uvicorn"], default="both")
    args = parser.parse_args()
    stacks = ["uvicorn", "serve"] if args.stack == "both" else [args.stack]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stacks:
            folder = Path(tmp) / stack
            folder.mkdir()
            results.append(measure(stack, folder, args))
            print(results[-1], flush=True)
    cores = os.cpu_count() or 1
    print(f"\n{HOGS} busy loops on {cores} cores; {args.processes} API processes each")
    print(
        "stack    answers dropped 5xx  p50 ms  p99 ms  (before SIGTERM: p50 p99)"
        "  first answer after SIGTERM  longest wait after it  streams cut"
    )
    for r in results:
        print(
            f"{r['stack']:<8} {r['answers']:>7} {r['dropped']:>7} {r['5xx']:>3} {r['p50_ms']:>7.0f}"
            f" {r['p99_ms']:>7.0f}  {r['p50_before_sigterm_ms']:>12.0f}"
            f" {r['p99_before_sigterm_ms']:>7.0f} {r['answered_after_sigterm_s']:>25.1f} s"
            f" {r['longest_wait_after_sigterm_s']:>20.1f} s {r['streams_without_hint']:>12}"
        )
    if len(results) == 2:
        old, new = results
        wait = new["longest_wait_after_sigterm_s"] / old["longest_wait_after_sigterm_s"]
        print(
            f"serve / uvicorn: p50 {new['p50_ms'] / old['p50_ms']:.2f}x, p99"
            f" {new['p99_ms'] / old['p99_ms']:.2f}x, longest wait after SIGTERM {wait:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
