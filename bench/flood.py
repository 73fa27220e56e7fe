"""Flood: jobs logging 20 keys as fast as they can, on a real server and worker, both stacks.

For each stack (embedded: SQLite database and SQLite broker, one server process as `torchyard
up`; services: a fresh PostgreSQL database and the Redis broker at --redis; both set up by
bench/load.py's helpers) this starts a real uvicorn server and a real Celery worker with room
for --runs jobs, then measures two phases on it, one after the other:
  1. one run alone, logging 20 keys a step as fast as it can for --seconds;
  2. --runs runs at once (12), the same, starting at the same instant;
with a live viewer on every run's event stream (bench/load.py's viewers: every point, its
delay from log() to the viewer, the last status). Ingestion rate: the points_ingested counter
(app/ops/counters.py) read from the database every 0.5 s, over the logging window.

Figures per stack: the one-run rate, the --runs-job rate and their ratio (target >= 0.5),
each rate the phase's points over the time from "go" to its last run's end;
the viewers' lag p50/p95/max (target: seconds, p95 < 10 s); each run finished within 10 s of
its job's end; 'database is locked' in the server's log (target 0); every viewer got every
point and the run's final status. Exits 1 when a target is missed.

    .venv/bin/python bench/flood.py [--stack embedded|services|both] [--seconds 10]
        [--runs 12] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from sqlalchemy import Engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from bench.lag_split import poll_parts, split_lags, stored_steps  # noqa: E402
from bench.load import (  # noqa: E402
    load_average,
    percentiles,
    running_stack,
    spool_points,
    viewers_process,
)

RATIO_TARGET = 0.5
LAG_TARGET_S = 10.0
FINISH_TARGET_S = 10.0
LOCKED = "database is locked"
WAL_BYTES: list[int] = []  # the SQLite WAL's size at each sample of the current phase
KEYS = 20

# The job: says it is ready (in its log: the workspace is read-only in the sandbox), waits for
# the bench's "go", logs KEYS keys a step as fast as it can for --seconds, and says when it
# ended, so the bench times the run's end from it.
SCRIPT = '''"""torchyard flood bench: log 20 keys a step as fast as possible for --seconds."""

import argparse
import math
import time
from pathlib import Path

from torchyard.sdk import init

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=10)
args = parser.parse_args()
run = init()
print("flood ready", flush=True)
go = Path(__file__).resolve().parent / "sync" / "go"
while not go.exists():
    time.sleep(0.01)
start = float(go.read_text())
time.sleep(max(0.0, start - time.time()))
cpu = time.process_time()
keys = [f"flood/k{i:02d}" for i in range(20)]
step = 0
end = time.time() + args.seconds
while time.time() < end:
    step += 1
    x = step * 1e-4
    run.log({k: math.sin(x + i) for i, k in enumerate(keys)}, step=step)
run.finish()
cpu = time.process_time() - cpu
print(f"flood ended at {time.time()!r} after {step * 20} points, cpu {cpu:.3f}", flush=True)
'''


def said(workspace: Path, run_id: int, prefix: str) -> str | None:
    """What follows ``prefix`` in the run's log, when its job has printed it."""
    log = workspace.parent / "runs" / str(run_id) / "output.log"
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return None
    at = text.rfind(prefix)
    return None if at < 0 else text[at + len(prefix) :].split("\n", 1)[0]


def ingested(engine: Engine) -> int:
    from app.ops import counters

    with Session(engine) as session:
        return counters.total(session, name=counters.POINTS_INGESTED)


def sample_counter(
    engine: Engine,
    stop: threading.Event,
    out: list[tuple[float, int]],
    run_ids: list[int],
    steps: list[tuple[float, dict[tuple[int, str], int]]],
) -> None:
    """The points counter every 0.5 s, and each key's stored step every 0.25 s (when a point
    was stored, to split a viewer's lag into ingestion and stream)."""
    tick = 0
    wal = Path(f"{engine.url.database}-wal") if engine.url.get_backend_name() == "sqlite" else None
    while not stop.is_set():
        if wal is not None:  # SQLite: how far its WAL grows while the streams read beside it
            try:
                WAL_BYTES.append(wal.stat().st_size)
            except OSError:
                pass
        if tick % 2 == 0:
            out.append((time.time(), ingested(engine)))
        steps.append((time.time(), stored_steps(engine, run_ids)))
        tick += 1
        stop.wait(0.25)
    steps.append((time.time(), stored_steps(engine, run_ids)))


def rate_between(samples: list[tuple[float, int]], t0: float, t1: float) -> float:
    """Points per second between the samples nearest to t0 and t1."""
    a = min(samples, key=lambda s: abs(s[0] - t0))
    b = min(samples, key=lambda s: abs(s[0] - t1))
    return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else float("nan")


def cpu_seconds(pid: int, *, descendants: bool = True) -> float:
    """User + system CPU time so far of a process and its descendants (/proc, clock ticks)."""
    ticks, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            ticks += _stat_ticks(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1])
            for task in Path(f"/proc/{p}/task").iterdir() if descendants else ():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def database_cpu_seconds() -> float:
    """CPU time so far of the machine's PostgreSQL processes (their backends do the services
    stack's inserts and reads; SQLite's work is in the worker and the API): 0 without one."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, _, tail = stat.read_text().rpartition(")")
        except OSError:
            continue
        if head.split("(", 1)[-1] in ("postgres", "postmaster"):
            ticks += _stat_ticks(tail)
    return ticks / os.sysconf("SC_CLK_TCK")


def _stat_ticks(after_name: str) -> int:
    """User + system clock ticks from a /proc/PID/stat line's fields after its ``(name)``."""
    fields = after_name.split()
    return int(fields[11]) + int(fields[12])


def phase(
    runs: int,
    args: argparse.Namespace,
    base_url: str,
    token: str,
    workspace: Path,
    url: str,
    server_pid: int,
    worker_pid: int,
) -> dict[str, Any]:
    """`runs` jobs flooding at once; their rate, lag, ends and streams."""
    from app.db import make_engine

    sync = workspace / "sync"
    for f in sync.iterdir():
        f.unlink()
    engine = make_engine(url)
    api = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    config = {"script": "flood_script.py", "params": {"seconds": args.seconds}}
    exp = api.post("/api/experiments", json={"name": f"flood-{runs}", "config": config})
    exp.raise_for_status()
    run_ids = []
    for _ in range(runs):
        r = api.post(f"/api/experiments/{exp.json()['id']}/runs")
        r.raise_for_status()
        run_ids.append(r.json()["id"])
    deadline = time.time() + args.seconds + 900
    # A process per viewer, as each browser tab is its own client: one process parsing every
    # stream fell behind the streams themselves on a loaded box (3.66M points of one run alone
    # were not through it in 300 s), and its lag was counted as the product's.
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    viewers = [
        ctx.Process(
            target=viewers_process, args=(base_url, token, [run_id], 1, deadline, 0.0, queue)
        )
        for run_id in run_ids
    ]
    for viewer in viewers:
        viewer.start()
    t0 = time.monotonic()
    while sum(said(workspace, run_id, "flood ready") is not None for run_id in run_ids) < runs:
        if time.monotonic() - t0 > 600:
            raise RuntimeError("the runs did not come up in 600 s")
        time.sleep(0.2)
    WAL_BYTES.clear()
    samples: list[tuple[float, int]] = []
    steps: list[tuple[float, dict[tuple[int, str], int]]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_counter, args=(engine, stop, samples, run_ids, steps))
    sampler.start()
    parts_before = poll_parts(api)
    start = time.time() + 1.0
    server_cpu = cpu_seconds(server_pid)
    worker_cpu = cpu_seconds(worker_pid, descendants=False)
    database_cpu = database_cpu_seconds()
    (sync / "go.tmp").write_text(repr(start))
    (sync / "go.tmp").rename(sync / "go")
    finished: dict[int, dict[str, Any]] = {}
    while len(finished) < runs and time.time() < deadline:
        for run_id in run_ids:
            if run_id not in finished:
                run = api.get(f"/api/runs/{run_id}").json()
                if run["status"] not in ("queued", "running"):
                    finished[run_id] = run
                    finished[run_id]["seen_at"] = time.time()
        time.sleep(0.2)
    worker_after = cpu_seconds(worker_pid, descendants=False)
    database_after = database_cpu_seconds()
    stop.set()
    sampler.join()
    results = [queue.get(timeout=max(deadline - time.time(), 1) + 120) for _ in viewers]
    # The API's CPU time from "go" to the last stream's end, over that time: near 1.0, the
    # server (one process, its polls and their JSON) was saturated.
    server_busy = (cpu_seconds(server_pid) - server_cpu) / (
        max(r["ended_at"] for r in results) - start
    )
    parts_after = poll_parts(api)
    for viewer in viewers:
        viewer.join()
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        raise RuntimeError(f"viewers failed: {failed}")
    last_seen = max(r["seen_at"] for r in finished.values())
    # The worker's own process (its forwarding threads, not its jobs) from "go" to the last
    # run's end: near 1.0, ingestion was bound by the worker's one interpreter.
    worker_busy = (worker_after - worker_cpu) / (last_seen - start)
    ends = []
    logged = 0
    jobs_cpu = 0.0  # the jobs' own CPU from "go" to their end (each job says it)
    for run_id in run_ids:
        ended = said(workspace, run_id, "flood ended at ")
        assert ended is not None, f"run {run_id}: the job did not say when it ended"
        end = float(ended.split()[0])
        jobs_cpu += float(ended.rsplit("cpu ", 1)[1])
        ends.append(finished[run_id]["seen_at"] - end)
        logged += spool_points(workspace.parent / "runs" / str(run_id) / "metrics.jsonl")
    stored = ingested(engine) - min(n for _, n in samples)
    api.close()
    engine.dispose()
    viewers_out = [v for r in results for v in r["viewers"]]
    lags = sorted(lag for r in results for lag in r["lags"])
    ingest_lags, stream_lags = split_lags([p for r in results for p in r["seen"]], steps)
    # Where the stream's polls went over the phase: per part, the mean seconds a poll spent
    # there, and how many polls (the wait part counts every poll, read those that read).
    polls = {
        part: (
            parts_after[part][0] - parts_before.get(part, (0.0, 0.0))[0],
            parts_after[part][1] - parts_before.get(part, (0.0, 0.0))[1],
        )
        for part in parts_after
    }
    # Each viewer process's CPU time over its time from "go" to its stream's end: near 1.0,
    # the viewer itself was the bottleneck; well below it, it waited for the stream.
    busy = [r["cpu_s"] / max(r["ended_at"] - start, 1e-9) for r in results]
    return {
        "runs": runs,
        # Points stored for the phase over the time from "go" to the last run's end: the rate
        # ingestion held while it had a backlog (the jobs outlog it on a 2-core box).
        "rate": stored / (last_seen - start),
        "rate_in_window": rate_between(samples, start, start + args.seconds),
        "stream_failures": [v for v in viewers_out if not v.get("complete")][:3],
        "points_logged": logged,
        "points_stored_in_phase": stored,
        "lag_s": percentiles(lags),
        "ingest_lag_s": percentiles(ingest_lags),
        "stream_lag_s": percentiles(stream_lags),
        "polls": {
            part: {"n": n, "mean_ms": 1000 * total / n if n else float("nan"), "sum_s": total}
            for part, (total, n) in polls.items()
        },
        "wal_mb_max": max(WAL_BYTES, default=0) / 1e6,
        "stream_seconds": max(r["ended_at"] for r in results) - start,
        "viewer_cpu_s": {
            "max": max(r["cpu_s"] for r in results),
            "sum": sum(r["cpu_s"] for r in results),
        },
        "server_busy": server_busy,
        "worker_busy": worker_busy,
        # CPU seconds per 1,000 points stored, by whom: where a point's cost grows with runs.
        "cpu_ms_per_1k": {
            "jobs": 1e6 * jobs_cpu / stored,
            "worker": 1e6 * (worker_after - worker_cpu) / stored,
            "postgresql": 1e6 * (database_after - database_cpu) / stored,
            "api": 1e6 * server_busy * (max(r["ended_at"] for r in results) - start) / stored,
            "viewers": 1e6 * sum(r["cpu_s"] for r in results) / stored,
        },
        "viewer_busy": {"max": max(busy), "median": statistics.median(busy)},
        # When the last stream ended after the last run was seen finished: the viewers' drain.
        "streams_ended_after_runs_s": max(r["ended_at"] for r in results) - last_seen,
        "finish_after_job_end_s": {"max": max(ends), "min": min(ends)},
        "succeeded": sum(1 for r in finished.values() if r["status"] == "succeeded"),
        "streams_complete": sum(1 for v in viewers_out if v.get("complete")),
        "streams_final_status": sum(1 for v in viewers_out if v.get("last_status") == "succeeded"),
    }


def bench_stack(name: str, args: argparse.Namespace) -> dict[str, Any]:
    # One viewer per run, all as the bench's user (8 streams a user by default).
    streams = {"TORCHYARD_SSE_MAX_STREAMS_PER_USER": str(args.runs + 4)}
    streams |= dict(item.split("=", 1) for item in args.set)  # settings to try
    script = ("flood_script.py", SCRIPT)
    with running_stack(
        name, args, kind="flood", script=script, runs=args.runs, extra_env=streams
    ) as s:
        load_before = load_average()
        where = (s.base_url, s.token, s.workspace, s.database_url, s.server_pid, s.worker_pid)
        one = phase(1, args, *where)
        many = phase(args.runs, args, *where)
        log_file = s.logs / "server.log"
    locked = log_file.read_text(errors="replace").count(LOCKED)
    return {"stack": name, "load_before": load_before, "one": one, "many": many, "locked": locked}


def report(res: dict[str, Any]) -> bool:
    one, many = res["one"], res["many"]
    ratio = many["rate"] / one["rate"]
    lag = many["lag_s"]
    finish = many["finish_after_job_end_s"]["max"]
    n = many["runs"]
    checks = [
        ("one-run ingest rate", f"{one['rate']:,.0f} points/s", "", float("nan"), True),
        (
            f"{n}-job ingest rate",
            f"{many['rate']:,.0f} points/s",
            f">= {RATIO_TARGET:.1f} x one",
            ratio / RATIO_TARGET,
            ratio >= RATIO_TARGET,
        ),
        (
            "viewer lag p95 (p50, p99)",
            f"{lag['p95']:.2f} s ({lag['p50']:.2f}, {lag['p99']:.2f})",
            f"< {LAG_TARGET_S:.0f} s",
            lag["p95"] / LAG_TARGET_S,
            lag["p95"] < LAG_TARGET_S,
        ),
        (
            "run finished after its job's end",
            f"max {finish:.1f} s (one run alone: {one['finish_after_job_end_s']['max']:.1f} s)",
            f"< {FINISH_TARGET_S:.0f} s",
            finish / FINISH_TARGET_S,
            finish < FINISH_TARGET_S,
        ),
        ("'database is locked' in the API's log", str(res["locked"]), "0", 0.0, res["locked"] == 0),
        (
            "streams complete, with the final status",
            f"{many['streams_complete']}/{n}, {many['streams_final_status']}/{n}",
            "all",
            many["streams_complete"] / n,
            many["streams_complete"] == n == many["streams_final_status"] == many["succeeded"],
        ),
    ]
    print(f"\n== {res['stack']}: 1 run, then {n} runs, 20 keys as fast as they can")
    print(f"   load average before {res['load_before']}")
    print(f"{'figure':40s} {'result':52s} {'target':16s} {'ratio':>6s}  ok")
    ok = True
    for figure, value, target, r, met in checks:
        ok &= met
        print(f"{figure:40s} {value:52s} {target:16s} {r:6.2f}  {'yes' if met else 'NO'}")
    for failure in many["stream_failures"]:
        print(f"   a stream not complete: {failure}")
    for label, ph in (("one run alone", one), (f"{n} jobs", many)):
        print(
            f"   {label}: viewer lag p50 {ph['lag_s']['p50']:.2f} s, p95 {ph['lag_s']['p95']:.2f} s"
            f"; each viewer process's CPU / wall: max {ph['viewer_busy']['max']:.2f}, median "
            f"{ph['viewer_busy']['median']:.2f} (CPU max {ph['viewer_cpu_s']['max']:.1f} s); "
            f"last stream ended {ph['streams_ended_after_runs_s']:.1f} s after the last run; "
            f"the API's CPU / wall {ph['server_busy']:.2f}, the worker's own "
            f"{ph['worker_busy']:.2f}"
        )
        per = ", ".join(f"{k} {v:.2f}" for k, v in ph["cpu_ms_per_1k"].items())
        print(f"   {label}: CPU ms per 1,000 points stored: {per}")
    for label, ph in (("one run alone", one), (f"{n} jobs", many)):
        ing, st = ph["ingest_lag_s"], ph["stream_lag_s"]
        print(
            f"   {label}: lag split at the point's storing: ingestion (log() -> stored) p50 "
            f"{ing['p50']:.2f} s, p95 {ing['p95']:.2f} s; stream (stored -> viewer) p50 "
            f"{st['p50']:.2f} s, p95 {st['p95']:.2f} s"
        )
        streams = ph["runs"]
        polls = ph["polls"].get("read", {}).get("n", 0)
        print(
            f"   {label}: {polls:.0f} polls, {polls / streams / ph['stream_seconds']:.1f} a "
            "second a stream; a poll's mean ms: "
            + ", ".join(f"{part} {v['mean_ms']:.1f}" for part, v in sorted(ph["polls"].items()))
            + f"; SQLite WAL at most {ph['wal_mb_max']:.0f} MB"
        )
    print(
        f"   points logged {many['points_logged']:,}, stored {many['points_stored_in_phase']:,}"
        f"; ratio {n}-job / one-run rate: {ratio:.2f}"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stack", choices=["embedded", "services", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "TORCHYARD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        help="admin URL: a database is created next to it for the bench and dropped after",
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7", help="flushed first")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="TORCHYARD_NAME=VALUE",
        help="a setting for the stack's server, worker and jobs (repeatable)",
    )
    args = parser.parse_args()
    stacks = ["embedded", "services"] if args.stack == "both" else [args.stack]
    results, ok = [], True
    for name in stacks:
        res = bench_stack(name, args)
        results.append(res)
        ok &= report(res)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(f"\nall targets met: {'yes' if ok else 'NO'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
