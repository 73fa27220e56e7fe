"""The GPU panel (GET /api/gpus, the /gpus page), per-user accounting (GET /api/usage), and the
NVML edge: GPUs busy with processes torchyard did not start are never handed out.

Rows are made through the real services (runs queued by app.runs.service, leases taken by
app.gpus.service.try_start) in the suite's database; the only stand-in is a fake NVML module
given to worker.gpus.read_gpu_stats.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from app.auth.models import User
from app.db import session_scope
from app.experiments.config.model import with_seed
from app.experiments.config.validate import validate_config
from app.experiments.models import Experiment
from app.gpus.models import GpuLease, WorkerHost
from app.gpus.panel import gpu_panel
from app.gpus.service import StartOutcome, touch_host, try_start
from app.gpus.usage import gpu_usage
from app.metrics.ingest import ingest_points
from app.runs.models import Run, RunStatus
from app.runs.service import create_run
from app.runs.state import lifecycle
from app.settings import get_settings
from app.timeutil import utcnow
from tests.conftest import make_user
from tests.test_pages import login
from worker.gpus import Inventory, gpu_stats, read_gpu_stats

TTL = 15.0
NEVER_STARVES = 1e12
# Ahead of every run other tests leave queued in the shared database; TOP + 1 is the highest
# priority there is (app.runs.schemas).
TOP = 999
GIB = 1024**3


@dataclass
class Made:
    hosts: list[str]
    run_ids: list[int]


def queued_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    """What a test created; its queued runs are cancelled and its hosts and leases removed
    afterwards, so that no live worker of another test ever schedules around them. Members
    may set priorities up to TOP + 1 here, as an admin may allow (TORCHYARD_MAX_USER_PRIORITY):
    the tests' runs come before anything else queued in the suite's database. The `made`
    fixture of this module and of tests/test_gpu_requests.py."""
    monkeypatch.setenv("TORCHYARD_MAX_USER_PRIORITY", str(TOP + 1))
    get_settings.cache_clear()
    made = Made([], [])
    yield made
    remove(made)
    monkeypatch.delenv("TORCHYARD_MAX_USER_PRIORITY")
    get_settings.cache_clear()


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    yield from queued_world(monkeypatch)


def remove(made: Made) -> None:
    with session_scope() as session:
        session.execute(delete(GpuLease).where(GpuLease.run_id.in_(made.run_ids)))
        session.execute(delete(WorkerHost).where(WorkerHost.host.in_(made.hosts)))
        session.execute(
            update(Run)
            .where(Run.id.in_(made.run_ids), Run.status.in_([RunStatus.queued, RunStatus.running]))
            .values(status=RunStatus.cancelled, finished_at=utcnow())
        )


def user_named(session: Any, username: str) -> User:
    return session.scalars(select(User).where(User.username == username)).one()


def queue_run(made: Made, username: str, gpus: int, priority: int = TOP) -> int:
    with session_scope() as session:
        owner = user_named(session, username)
        config = {"recipe": "tiny_mlp", "params": {}, "resources": {"gpus": gpus, "nproc": 1}}
        exp = Experiment(name="gpu-panel", config=config, owner_id=owner.id)
        session.add(exp)
        session.flush()
        run = create_run(session, experiment=exp, owner=owner, overrides={}, priority=priority)
        made.run_ids.append(run.id)
        return run.id


def queue_stranded(made: Made, username: str, gpus: int, priority: int = TOP) -> int:
    """A run no live host can ever start, queued as it still can be: before its host went away
    (or while no host was live). app.runs.service refuses a new one (tests/test_gpu_requests.py),
    so this queues through app.runs.state.lifecycle, as create_run would have."""
    with session_scope() as session:
        owner = user_named(session, username)
        config = {"recipe": "tiny_mlp", "params": {}, "resources": {"gpus": gpus, "nproc": 1}}
        exp = Experiment(name="gpu-panel", config=config, owner_id=owner.id)
        session.add(exp)
        session.flush()
        run = lifecycle.queue(
            session,
            experiment_id=exp.id,
            owner_id=owner.id,
            config=with_seed(validate_config(config, loc_prefix=())),
            priority=priority,
        )
        made.run_ids.append(run.id)
        return run.id


def host(made: Made, gpus: list[int] | None = None) -> str:
    """A new host's name, removed after the test; with `gpus`, live (heartbeated now) with
    them: a run asking for GPUs is refused while no live host has that many
    (app.runs.service), so each test brings its own rather than rely on the hosts another
    module's workers left heartbeating (with only the suite's 0-GPU worker live, a 1-GPU run
    is refused). Without, the caller heartbeats it (tests/test_gpu_requests.py)."""
    name = f"panel-{secrets.token_hex(4)}"
    made.hosts.append(name)
    if gpus is not None:
        with session_scope() as session:
            touch_host(session, host=name, gpus=gpus, now=utcnow())
    return name


def start_on(run_id: int, host_name: str, inventory: list[int], stats: Any = None) -> Any:
    with session_scope() as session:
        return try_start(
            session,
            run_id=run_id,
            host=host_name,
            inventory=inventory,
            lease_ttl_seconds=TTL,
            starvation_seconds=NEVER_STARVES,
            gpu_stats=stats,
        )


# --- the NVML edge: a stand-in for pynvml ------------------------------------------------------


class FakeNvml:
    """pynvml's calls that worker.gpus uses, over a declared set of GPUs."""

    def __init__(self, gpus: list[dict[str, Any]]) -> None:
        self.gpus = gpus
        self.open = 0

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        self.open += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.open -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=handle["used"], total=handle["total"], free=0)

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=handle["util"], memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: dict[str, Any]) -> list:  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=GIB) for pid in handle["pids"]]


def fake_nvml(*pids_per_gpu: list[int]) -> FakeNvml:
    return FakeNvml(
        [
            {
                "used": (1 + len(pids)) * GIB,
                "total": 16 * GIB,
                "util": 50.0 * len(pids),
                "pids": pids,
            }
            for pids in pids_per_gpu
        ]
    )


def test_read_gpu_stats_reports_memory_utilization_and_processes() -> None:
    nvml = fake_nvml([], [4242, 17])
    stats = read_gpu_stats(nvml)
    assert stats == [
        {"index": 0, "memory_used": GIB, "memory_total": 16 * GIB, "utilization": 0.0, "pids": []},
        {
            "index": 1,
            "memory_used": 3 * GIB,
            "memory_total": 16 * GIB,
            "utilization": 100.0,
            "pids": [17, 4242],
        },
    ]
    assert nvml.open == 0  # shut down again
    # A fake inventory has nothing to measure: NVML is not asked.
    assert gpu_stats(Inventory("h", (0, 1), "fake"), nvml) is None


def test_a_gpu_busy_with_a_process_torchyard_did_not_start_is_not_handed_out(made) -> None:
    username, _, _ = make_user()
    box = host(made, [0, 1])
    # GPU 0 runs somebody's hand-started job; GPU 1 is idle.
    stats = gpu_stats(Inventory(box, (0, 1), "nvml"), fake_nvml([999], []))
    first, second = queue_run(made, username, 1), queue_run(made, username, 1)

    started = start_on(first, box, [0, 1], stats)
    assert started.outcome is StartOutcome.STARTED and started.gpu_indices == (1,)
    # Our own job now runs on GPU 1: its process does not make GPU 1 external.
    stats = gpu_stats(Inventory(box, (0, 1), "nvml"), fake_nvml([999], [31337]))
    waiting = start_on(second, box, [0, 1], stats)
    # Not here: GPU 0 is external. (Another live host in the shared database, e.g. one a
    # worker of an earlier test heartbeated seconds ago, may be named as the place it fits.)
    assert waiting.outcome is StartOutcome.WAIT
    assert waiting.reason == "waiting for 1 free GPUs on one host" or (
        waiting.reason.endswith("not here") and box not in waiting.reason
    )

    # The external job ends: GPU 0 is handed out.
    stats = gpu_stats(Inventory(box, (0, 1), "nvml"), fake_nvml([], [31337]))
    assert start_on(second, box, [0, 1], stats).gpu_indices == (0,)


# --- GET /api/gpus -----------------------------------------------------------------------------


def test_gpu_panel_shows_each_gpu_state_and_the_queue_with_reasons(client, made) -> None:
    alice, _, alice_headers = make_user()
    box = host(made, [0, 1, 2])
    stats = gpu_stats(Inventory(box, (0, 1, 2), "nvml"), fake_nvml([], [555], []))
    holder = queue_run(made, alice, 1)
    assert start_on(holder, box, [0, 1, 2], stats).gpu_indices == (0,)
    # Can never fit (no host has 64 GPUs), then a low-priority one behind it.
    huge = queue_stranded(made, alice, 64)
    later = queue_stranded(made, alice, 64, priority=TOP - 1)

    r = client.get("/api/gpus", headers=alice_headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"generated_at", "hosts", "queue", "fair_share"}
    (mine,) = [h for h in body["hosts"] if h["host"] == box]
    gpus = {g["index"]: g for g in mine["gpus"]}
    assert gpus[0]["state"] == "leased"
    assert gpus[0]["run_id"] == holder and gpus[0]["owner"] == alice and gpus[0]["since"]
    assert gpus[1]["state"] == "busy (external)" and gpus[1]["run_id"] is None
    assert gpus[2]["state"] == "free"
    assert gpus[1]["memory_used_mb"] == 2048.0 and gpus[1]["memory_total_mb"] == 16384.0
    assert gpus[1]["utilization"] == 50.0

    queue = {q["run_id"]: q for q in body["queue"]}
    assert holder not in queue  # running, not queued
    assert [q["position"] for q in body["queue"]] == list(range(1, len(body["queue"]) + 1))
    assert queue[huge]["position"] < queue[later]["position"]
    assert queue[huge]["reason"].startswith("needs 64 GPUs on one host; no host has that many")
    assert queue[huge]["owner"] == alice and queue[huge]["gpus"] == 64
    assert queue[huge]["priority"] == TOP and queue[huge]["waiting_seconds"] >= 0


def test_gpu_panel_queue_order_and_reasons_come_from_the_scheduler(made) -> None:
    """Exact reasons need a world of our own: hosts heartbeating in the future are the only
    live ones there, and our runs (top priority) come before anything else queued."""
    bob, _, _ = make_user()
    box = host(made, [0, 1])
    future = utcnow() + timedelta(days=365 * 50)
    holder = queue_run(made, bob, 1)
    assert start_on(holder, box, [0, 1]).gpu_indices == (0,)
    two = queue_run(made, bob, 2)  # does not fit: one GPU left
    one = queue_run(made, bob, 1)  # backfills onto GPU 1
    urgent = queue_run(made, bob, 2, priority=TOP + 1)  # first in line, cannot fit either
    cpu = queue_run(made, bob, 0)
    with session_scope() as session:
        touch_host(session, host=box, gpus=[0, 1], now=future)
        panel = gpu_panel(
            session, now=future, lease_ttl_seconds=TTL, starvation_seconds=NEVER_STARVES
        )
    assert [h.host for h in panel.hosts] == [box]
    ours = [q for q in panel.queue if q.run_id in (two, one, urgent, cpu)]
    assert [q.run_id for q in ours] == [urgent, two, one, cpu]
    assert [q.position for q in ours[:3]] == [1, 2, 3]
    reasons = {q.run_id: q.reason for q in ours}
    assert reasons[urgent] == "waiting for 2 free GPUs on one host"
    assert reasons[two] == "waiting for 2 free GPUs on one host"
    assert reasons[one] == f"starting: GPUs 1 of {box} are free"
    assert reasons[cpu] == "starting: needs no GPUs, waiting for a free worker slot"

    # Once the first in line has waited too long, nothing with GPUs backfills past it.
    with session_scope() as session:
        panel = gpu_panel(session, now=future, lease_ttl_seconds=TTL, starvation_seconds=60)
    reasons = {q.run_id: q.reason for q in panel.queue}
    assert reasons[one] == f"run {urgent} has waited too long; it starts first"


def test_gpu_panel_needs_a_login(client) -> None:
    assert client.get("/api/gpus").status_code == 401
    assert client.get("/api/usage").status_code == 401


# --- GET /api/usage ----------------------------------------------------------------------------

T0 = datetime(2001, 3, 1, tzinfo=UTC)


def ran(made: Made, username: str, gpus: str, start: datetime, end: datetime | None) -> int:
    run_id = queue_run(made, username, 0, priority=-TOP)
    with session_scope() as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(
                status=RunStatus.succeeded if end else RunStatus.running,
                started_at=start,
                finished_at=end,
                gpu_indices=gpus,
            )
        )
    return run_id


def iso(value: datetime) -> str:
    return value.isoformat()


def test_usage_clips_runs_to_the_period_and_counts_gpus(client, made) -> None:
    carol, _, carol_headers = make_user()
    dave, _, dave_headers = make_user()
    _, _, admin_headers = make_user(admin=True)
    h = timedelta(hours=1)
    ran(made, carol, "0,1", T0 - 2 * h, T0 + 3 * h)  # 3 h inside x 2 GPUs = 6
    ran(made, carol, "2", T0 + 9 * h, T0 + 12 * h)  # 1 h inside (until T0 + 10h) x 1 = 1
    ran(made, carol, "", T0 + h, T0 + 2 * h)  # CPU run: counted, 0 GPU-hours
    ran(made, carol, "3", T0 - 5 * h, T0 - h)  # before the period: not counted
    ran(made, dave, "0,1,2,3", T0 + 4 * h, T0 + 4.5 * h)  # 0.5 h x 4 = 2
    period = {"since": iso(T0), "until": iso(T0 + 10 * h)}

    r = client.get("/api/usage", params=period, headers=carol_headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["since"].startswith("2001-03-01T00:00:00")
    rows = [(u["username"], u["gpu_hours"], u["runs"], u["gpu_runs"]) for u in body["users"]]
    assert (carol, 7.0, 3, 2) in rows and (dave, 2.0, 1, 1) in rows  # the team sees everyone's
    mine = client.get("/api/usage", params={**period, "owner": "me"}, headers=carol_headers)
    assert [(u["username"], u["gpu_hours"]) for u in mine.json()["users"]] == [(carol, 7.0)]

    dave_rows = client.get(
        "/api/usage", params={**period, "owner": dave}, headers=carol_headers
    ).json()["users"]
    assert [(u["username"], u["gpu_hours"]) for u in dave_rows] == [(dave, 2.0)]

    everyone = client.get("/api/usage", params=period, headers=admin_headers).json()["users"]
    names = [u["username"] for u in everyone]
    assert names.index(carol) < names.index(dave)  # most GPU-hours first

    # A period with nothing in it: the user's own row says zero.
    empty = client.get(
        "/api/usage",
        params={"since": iso(T0 - 100 * h), "until": iso(T0 - 50 * h), "owner": "me"},
        headers=dave_headers,
    ).json()["users"]
    assert [(u["username"], u["gpu_hours"], u["runs"]) for u in empty] == [(dave, 0.0, 0)]


def test_usage_counts_a_running_run_until_now(made) -> None:
    erin, _, _ = make_user()
    now = T0 + timedelta(hours=5)
    ran(made, erin, "0", T0 + timedelta(hours=1), None)  # still running
    with session_scope() as session:
        user = user_named(session, erin)
        (row,) = gpu_usage(
            session, since=T0, until=T0 + timedelta(days=1), now=now, owner_id=user.id
        )
    assert row.gpu_hours == 4.0 and row.runs == 1


def test_usage_rejects_an_empty_period(client, user_headers) -> None:
    r = client.get("/api/usage", params={"since": iso(T0), "until": iso(T0)}, headers=user_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "since"]
    r = client.get("/api/usage", params={"since": "yesterday"}, headers=user_headers)
    assert r.status_code == 422


# --- the /gpus page ----------------------------------------------------------------------------


def test_gpus_page_shows_hosts_queue_and_usage(client, made) -> None:
    username, password, _ = make_user()
    box = host(made, [0, 1])
    holder = queue_run(made, username, 1)
    assert start_on(holder, box, [0, 1]).outcome is StartOutcome.STARTED
    waiting = queue_stranded(made, username, 64)
    login(client, username, password)

    r = client.get("/gpus")
    assert r.status_code == 200
    html = r.text
    assert '<a href="/gpus" id="nav-gpus">GPUs</a>' in html
    assert (
        f'<div class="card gpu-host" data-host="{box}" data-pool="local" data-executor="process">'
        in html
    )
    assert '<div class="gpu" data-gpu-index="0" data-state="leased">' in html
    assert '<div class="gpu" data-gpu-index="1" data-state="free">' in html
    assert f'<a href="/runs/{holder}">run {holder}</a>' in html
    assert f'<tr data-run-id="{waiting}">' in html
    assert "no host has that many" in html
    assert f'<tr data-user="{username}">' in html
    assert 'src="/static/gpus.js"' in html
    assert client.get("/static/gpus.js").status_code == 200


def test_gpus_page_redirects_to_login_when_logged_out(client) -> None:
    r = client.get("/gpus", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/gpus"


def test_a_starved_jobs_cpu_share_is_said_on_the_gpus_and_run_pages(client, made) -> None:
    """The job's CPU share over the last minutes (app.metrics.cpu_share), from the run's
    sys/cpu_percent points as the worker stores them: starved below 5% of one CPU."""
    username, password, _ = make_user()
    box = host(made, [0])
    holder = queue_run(made, username, 1)
    assert start_on(holder, box, [0]).outcome is StartOutcome.STARTED
    now = time.time()
    points = [("sys/cpu_percent", step, 0.4, now - 120 + step) for step in range(0, 121, 10)]
    with session_scope() as session:
        ingest_points(session, run_id=holder, points=points)
    login(client, username, password)
    said = "Starved: this job got 0.4% of a CPU in the last 2 minutes"
    assert said in client.get("/gpus").text
    page = client.get(f"/runs/{holder}").text
    assert f'<p id="run-cpu-share" class="queue-reason" role="status">{said}' in page
    (mine,) = [h for h in client.get("/api/gpus").json()["hosts"] if h["host"] == box]
    assert mine["gpus"][0]["cpu_share"].startswith(said) and mine["gpus"][0]["cpu_starved"]
