"""The ingestion gate (worker/ingest_gate.py): turns in the order asked, a run whose job has
ended first, never more holders than its width; and issue 27's embedded flood end to end: six
jobs logging 20 keys as fast as they can through a real worker on SQLite and the SQLite broker,
with a live stream on each run: no 'database is locked' in the API's log, every stream ends
with its run's final status, and each run finished within 10 s of its job's end while the
others still flood. Before the spool's backpressure (torchyard.runtime.ingest_mark) that was
53-129 s on this 2-core box: the jobs logged ~500k points/s, ingestion kept ~15k/s, and every
run ended with minutes of backlog. The stack follows the suite's pass: the embedded one
(SQLite + SQLite broker), or PostgreSQL + Redis (a database of its own, the broker
TORCHYARD_TEST_REDIS_URL's)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BASE_DIR, DATABASE_URL
from tests.databases import own_database, user_with_token
from tests.stack import REPO, free_port, purge_broker, start_logged, stop_process, wait_healthy
from tests.waits import wait_for
from torchyard.compose.processes import server_argv, worker_argv
from worker.ingest_gate import IngestGate, NoTurn, Turn


def take_turns(gate: IngestGate, asks: list[tuple[str, Turn]]) -> list[str]:
    """Each ask a thread that queues while the first holder keeps the gate; the order in
    which they got it."""
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def first() -> None:
        with gate.turn(Turn.LIVE):
            holding.set()
            release.wait(10)

    def ask(name: str, turn: Turn) -> None:
        with gate.turn(turn):
            order.append(name)

    threading.Thread(target=first).start()
    holding.wait(10)
    threads = []
    for name, turn in asks:
        t = threading.Thread(target=ask, args=(name, turn))
        t.start()
        threads.append(t)
        wait_for(lambda: len(gate._waiting) == len(threads), timeout=10, every=0.01, what=name)
    release.set()
    for t in threads:
        t.join(10)
    return order


def test_turns_go_in_the_order_asked_a_heartbeat_first_then_an_ended_job() -> None:
    order = take_turns(
        IngestGate(1),
        [
            ("a", Turn.LIVE),
            ("b", Turn.LIVE),
            ("end", Turn.ENDING),
            ("beat", Turn.LIVENESS),
            ("c", Turn.LIVE),
        ],
    )
    assert order == ["beat", "end", "a", "b", "c"]


def test_a_live_batch_not_given_its_turn_in_time_gives_up_and_leaves_the_queue() -> None:
    gate = IngestGate(1)
    with gate.turn(Turn.LIVE):
        with pytest.raises(NoTurn):
            with gate.turn(Turn.LIVE, timeout=0.05):
                pytest.fail("a second holder")
        assert gate._waiting == []
    with gate.turn(Turn.LIVE, timeout=0.05):  # free again: given at once
        pass


def test_never_more_holders_than_the_width() -> None:
    gate = IngestGate(2)
    inside, most = [0], [0]
    lock = threading.Lock()

    def batch() -> None:
        for _ in range(20):
            with gate.turn(Turn.LIVE):
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.001)
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=batch) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most[0] == 2


# --- the embedded flood (slow) ------------------------------------------------------------

RUNS = 6
FINISHED_WITHIN_S = 10.0
SECONDS = 1.0
ROOT = BASE_DIR / "flood"
# Waits for the test's "go", so the six jobs flood at once; says when it ended, in its log.
FLOOD_SCRIPT = """
import math, sys, time
from pathlib import Path
from torchyard.sdk import init

run = init()
go = Path(__file__).resolve().parent / "go"
while not go.exists():
    time.sleep(0.01)
seconds = float(sys.argv[1])
keys = [f"flood/k{i:02d}" for i in range(20)]
end = time.time() + seconds
step = 0
while time.time() < end:
    step += 1
    run.log({k: math.sin(step * 1e-3 + i) for i, k in enumerate(keys)}, step=step)
run.finish()
print(f"flood ended at {time.time()!r} after {step} steps", flush=True)
"""


@pytest.fixture
def embedded_stack() -> Iterator[tuple[str, dict[str, str], Path]]:
    with flood_stack() as stack:
        yield stack


@contextlib.contextmanager
def flood_stack(runs: int = RUNS, **extra: str) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A server and a worker with room for `runs` jobs, on a database and a broker of their own
    (the API's log is this test's alone): (base URL, auth headers, log dir). ``extra``: more
    settings of both processes."""
    workspace = ROOT / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "flood.py").write_text(FLOOD_SCRIPT)
    (workspace / "go").unlink(missing_ok=True)  # an earlier test's
    # A home per stack: its database, broker, data dir and logs. The module's two stacks run in
    # one process; the second one's runs (ids from 1 again) found the first's run folders and
    # job records in a shared data dir, and its worker took one of them for its own (CI).
    name = f"flood_{os.getpid()}_{secrets.token_hex(4)}"
    home = ROOT / name
    logs = home / "logs"
    logs.mkdir(parents=True)
    kind = "postgresql" if DATABASE_URL.startswith("postgresql") else "sqlite"
    broker = (
        os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
        if kind == "postgresql"
        else f"sqla+sqlite:///{home / 'broker.db'}"
    )
    purge_broker(broker)  # no message of an earlier test's runs
    with own_database(kind, home, name) as engine:
        token = user_with_token(engine, "flooder")
        env = dict(
            os.environ,
            TORCHYARD_DATABASE_URL=engine.url.render_as_string(hide_password=False),
            TORCHYARD_BROKER_URL=broker,
            TORCHYARD_DATA_DIR=str(home / "data"),
            TORCHYARD_WORKSPACE_DIR=str(workspace),
            PYTHONUNBUFFERED="1",
            # This checkout's worker and job code, whichever checkout the editable install names.
            PYTHONPATH=str(REPO),
            **extra,
        )
        port = free_port()
        worker = start_logged(worker_argv(runs + 1), env, logs / "worker.log")
        server = start_logged(server_argv("127.0.0.1", port), env, logs / "server.log")
        try:
            wait_healthy(f"http://127.0.0.1:{port}", server, logs / "server.log", timeout=180)
            yield f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}, logs
        finally:
            stop_process(server)
            stop_process(worker)


def follow(base_url: str, headers: dict[str, str], run_id: int, out: dict[int, object]) -> None:
    """Read the run's stream to its end; keep the last status it said (or the error)."""
    last = None
    try:
        timeout = httpx.Timeout(30, read=600)
        with httpx.stream(
            "GET", f"{base_url}/api/runs/{run_id}/events", headers=headers, timeout=timeout
        ) as r:
            event = ""
            for line in r.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "status":
                    last = json.loads(line[5:])["status"]
        out[run_id] = last
    except Exception as exc:
        out[run_id] = repr(exc)


def submit_floods(api: httpx.Client, seconds: float, runs: int = RUNS) -> list[int]:
    config = {"script": "flood.py", "args": [str(seconds)]}
    exp = api.post("/api/experiments", json={"name": "flood", "config": config})
    assert exp.status_code == 201, exp.text
    return [api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"] for _ in range(runs)]


@pytest.mark.slow
def test_six_runs_flooding_hit_no_database_lock_every_stream_ends_and_each_finishes_soon(
    embedded_stack: tuple[str, dict[str, str], Path],
) -> None:
    base_url, headers, logs = embedded_stack
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as api:
        run_ids = submit_floods(api, SECONDS)
        streams: dict[int, object] = {}
        viewers = [
            threading.Thread(target=follow, args=(base_url, headers, run_id, streams))
            for run_id in run_ids
        ]
        for v in viewers:
            v.start()

        def all_running() -> bool:
            return all(api.get(f"/api/runs/{i}").json()["status"] == "running" for i in run_ids)

        wait_for(all_running, timeout=180, every=0.5, what="six runs running")
        (ROOT / "workspace" / "go").touch()

        def ended(run_id: int) -> dict[str, Any] | None:
            run: dict[str, Any] = api.get(f"/api/runs/{run_id}").json()
            return run if run["status"] != "running" else None

        finished = {
            run_id: wait_for(
                functools.partial(ended, run_id),
                timeout=600,
                every=0.5,
                what=f"run {run_id} finished",
            )
            for run_id in run_ids
        }
        late = {}
        for run_id, run in finished.items():
            assert run["status"] == "succeeded", run
            said = re.search(r"flood ended at ([\d.]+)", api.get(f"/api/runs/{run_id}/logs").text)
            assert said, f"run {run_id}: the job did not say when it ended"
            job_end = float(said.group(1))
            late[run_id] = datetime.fromisoformat(run["finished_at"]).timestamp() - job_end
        for v in viewers:
            v.join(60)
    locked = (logs / "server.log").read_text(errors="replace").count("database is locked")
    print(f"finished after the job's end (s): {late}; 'database is locked' in the API: {locked}")
    assert locked == 0
    assert max(late.values()) <= FINISHED_WITHIN_S, late
    assert streams == dict.fromkeys(run_ids, "succeeded")


# Liveness on a short leash: a heartbeat due every 0.5 s, a run silent for 3 s reaped as lost.
# Before the fix, 12 jobs flooding for 25 s on this 2-core box had 1 of 12 runs reaped; 6 jobs
# had none.
SHORT_LEASH = {
    "TORCHYARD_RUN_HEARTBEAT_SECONDS": "0.5",
    "TORCHYARD_LEASE_TTL_SECONDS": "2.5",
    "TORCHYARD_RUN_LOST_SECONDS": "3",
    "TORCHYARD_REAP_INTERVAL_SECONDS": "1",
    "TORCHYARD_DB_IDLE_TRANSACTION_SECONDS": "1",  # below the lost limit (app.settings)
}
LEASH_RUNS = 12
LEASH_FLOOD_SECONDS = 25.0


# SQLite's one write lock is the subject (issue 39): the embedded pass only.
@pytest.mark.slow
@pytest.mark.local_only
def test_a_worker_whose_jobs_flood_is_never_taken_for_lost() -> None:
    """Issue 39: on SQLite the worker's heartbeat UPDATE lost the write lock to its own
    batches (the busy handler sleeps; the next batch takes the lock the moment the last one
    commits) until 'database is locked', and the reaper failed live runs as "worker lost".
    The heartbeat goes first at the ingestion gate now (worker.ingest_gate.liveness_turn):
    12 jobs flooding for 25 s, the runs reaped after 3 s of silence: none is, and no
    heartbeat write fails. bench/flood.py --liveness runs the issue's 12 jobs for 5 minutes."""
    with (
        flood_stack(LEASH_RUNS, **SHORT_LEASH) as (base_url, headers, logs),
        httpx.Client(base_url=base_url, headers=headers, timeout=60) as api,
    ):
        run_ids = submit_floods(api, LEASH_FLOOD_SECONDS, LEASH_RUNS)

        def all_running() -> bool:
            return all(api.get(f"/api/runs/{i}").json()["status"] == "running" for i in run_ids)

        wait_for(all_running, timeout=240, every=0.5, what="12 runs running")
        (ROOT / "workspace" / "go").touch()

        def ended() -> list[dict[str, Any]] | None:
            runs = [api.get(f"/api/runs/{i}").json() for i in run_ids]
            return runs if all(r["status"] not in ("queued", "running") for r in runs) else None

        runs = wait_for(ended, timeout=300, every=1, what="the floods finished")
    worker_log = (logs / "worker.log").read_text(errors="replace")
    ends = [(r["status"], r["attempt"], r["error"]) for r in runs]
    assert ends == [("succeeded", 1, None)] * LEASH_RUNS
    assert worker_log.count("heartbeat failed") == 0
