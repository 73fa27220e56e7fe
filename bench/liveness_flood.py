"""Liveness under a flood (issue 39): on the embedded stack, 12 jobs logging 20 keys as fast as
they can for 5 minutes, and the worker must never look lost.

Before the fix the worker's heartbeat UPDATE lost SQLite's write lock to its own ingestion
batches until 'database is locked', and the reaper failed 1-5 of 12 runs as "worker lost: no
heartbeat from vm for 60-78 s" while the worker was alive. Now a heartbeat goes first at the
ingestion gate (worker.ingest_gate.liveness_turn).

This starts a real uvicorn server and Celery worker on SQLite and the SQLite broker
(bench/load.py's running_stack, the product's settings: run_lost_seconds 60, heartbeats every
3 s), starts --runs flooding jobs at one instant (bench/flood.py's job), and samples every
run's heartbeat stamp each second while they flood. Figures: the oldest stamp seen on a
running run against run_lost_seconds (target: well below it), runs reaped as lost (target 0),
'heartbeat failed' lines in the worker's log (target 0). Exits 1 when a target is missed.

    .venv/bin/python bench/liveness_flood.py [--seconds 300] [--runs 12]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from sqlalchemy import Engine, select  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from bench.flood import SCRIPT, said  # noqa: E402
from bench.load import load_average, running_stack  # noqa: E402

RUN_LOST_SECONDS = 60.0  # the product's default, as in the report
STAMP_AGE_TARGET = RUN_LOST_SECONDS / 4


def stamp_ages(engine: Engine, run_ids: list[int]) -> dict[int, float]:
    """Seconds since each running run's heartbeat stamp, read from the database."""
    from app.runs.models import Run, RunStatus
    from app.timeutil import as_utc, utcnow

    now = utcnow()
    stmt = select(Run.id, Run.heartbeat_at).where(
        Run.id.in_(run_ids), Run.status == RunStatus.running, Run.heartbeat_at.is_not(None)
    )
    with Session(engine) as session:
        rows = session.execute(stmt).all()
    return {i: (now - as_utc(at)).total_seconds() for i, at in rows if at is not None}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--runs", type=int, default=12)
    args = parser.parse_args()
    from app.db import make_engine

    extra = {
        "TORCHYARD_SSE_MAX_STREAMS_PER_USER": str(args.runs + 4),
        "TORCHYARD_RUN_LOST_SECONDS": str(RUN_LOST_SECONDS),
    }
    script = ("flood_script.py", SCRIPT)
    with running_stack(
        "embedded", args, kind="liveness", script=script, runs=args.runs, extra_env=extra
    ) as s:
        load_before = load_average()
        engine = make_engine(s.database_url)
        api = httpx.Client(
            base_url=s.base_url, headers={"Authorization": f"Bearer {s.token}"}, timeout=60
        )
        config = {"script": "flood_script.py", "params": {"seconds": args.seconds}}
        exp = api.post("/api/experiments", json={"name": "liveness", "config": config})
        exp.raise_for_status()
        run_ids = [
            api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
            for _ in range(args.runs)
        ]
        deadline = time.time() + 900
        while not all(said(s.workspace, i, "flood ready") is not None for i in run_ids):
            if time.time() > deadline:
                raise SystemExit("the jobs did not start within 15 minutes")
            time.sleep(0.5)
        start = time.time() + 1
        (s.workspace / "sync" / "go").write_text(repr(start))
        oldest = 0.0
        statuses: dict[int, dict] = {}
        while time.time() < deadline + args.seconds:
            ages = stamp_ages(engine, run_ids)
            oldest = max([oldest, *ages.values()])
            statuses = {i: api.get(f"/api/runs/{i}").json() for i in run_ids}
            if all(r["status"] not in ("queued", "running") for r in statuses.values()):
                break
            time.sleep(1)
        took = time.time() - start
        worker_log = (s.logs / "worker.log").read_text(errors="replace")
    lost = [i for i, r in statuses.items() if "worker lost" in (r.get("error") or "")]
    failed_beats = worker_log.count("heartbeat failed")
    locked = worker_log.count("database is locked")
    succeeded = sum(1 for r in statuses.values() if r["status"] == "succeeded")
    checks = [
        (
            "oldest heartbeat stamp of a running run",
            f"{oldest:.1f} s",
            f"< {STAMP_AGE_TARGET:.0f} s (lost at {RUN_LOST_SECONDS:.0f})",
            oldest / STAMP_AGE_TARGET,
            oldest < STAMP_AGE_TARGET,
        ),
        ("runs reaped as lost", str(len(lost)), "0", float(len(lost)), not lost),
        ("'heartbeat failed' in the worker's log", str(failed_beats), "0", 0.0, not failed_beats),
        ("runs succeeded", f"{succeeded}/{args.runs}", "all", succeeded / args.runs, True),
    ]
    print(f"\n== embedded: {args.runs} jobs flooding for {args.seconds:.0f} s ({took:.0f} s)")
    print(
        f"   load average before {load_before}; 'database is locked' in the worker's log: {locked}"
    )
    ok = succeeded == args.runs
    for figure, value, target, ratio, met in checks:
        ok &= met
        print(f"{figure:42s} {value:12s} {target:28s} {ratio:6.2f}  {'yes' if met else 'NO'}")
    print(f"\nall targets met: {'yes' if ok else 'NO'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
