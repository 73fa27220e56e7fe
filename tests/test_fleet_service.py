"""The Fleet figures (app.fleet.service) and a run's GPU efficiency (app.metrics.gpu_efficiency)
over rows made in the suite's database: GPU-hours clipped to the window, utilisation and idle
share from the runs' own sys/gpu<i>/util samples, runs waiting, each user's own row; the
nearest-rank p95; the series-based idle check; the /fleet page and its API's access."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from app.auth.models import User
from app.db import session_scope
from app.fleet.service import fleet
from app.metrics import gpu_efficiency
from app.metrics.ingest import ingest_points
from app.runs.models import Run, RunStatus
from app.runs.state.notices import notice_lines
from tests.conftest import make_user
from tests.factories import add_run
from tests.test_pages import login

T0 = datetime(2001, 5, 1, tzinfo=UTC)


def ran(owner: int, gpus: str, start: datetime, end: datetime | None, util: list[float]) -> int:
    """A run that held ``gpus`` from start to end, its GPU 0 sampled once a second at ``util``."""
    with session_scope() as session:
        run_id = add_run(session, owner_id=owner, status="succeeded")
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(started_at=start, finished_at=end, gpu_indices=gpus)
        )
        at = start.timestamp()
        points = [("sys/gpu0/util", i, v, at + i) for i, v in enumerate(util)]
        points += [("sys/gpu0/mem_mb", i, 100.0 * i, at + i) for i in range(len(util))]
        ingest_points(session, run_id=run_id, points=points)
    return run_id


def user_id(name: str) -> int:
    with session_scope() as session:
        found = session.query(User.id).filter(User.username == name).scalar()
        assert found is not None
        return int(found)


def test_fleet_adds_up_hours_utilisation_idle_share_and_waiting_runs() -> None:
    alice, bob = (user_id(make_user()[0]) for _ in range(2))
    # alice: 2 GPUs for 2 h (half its samples idle), and 1 GPU from 1 h before the window.
    ran(alice, "0,1", T0, T0 + timedelta(hours=2), [0, 0, 80, 80])
    ran(alice, "3", T0 - timedelta(hours=1), T0 + timedelta(hours=1), [])
    with session_scope() as session:
        add_run(session, owner_id=bob, status=RunStatus.queued.value)
        add_run(session, owner_id=bob, status=RunStatus.queued.value)
    with session_scope() as session:
        rows = fleet(
            session, since=T0, until=T0 + timedelta(hours=10), now=T0 + timedelta(hours=10), below=1
        )
        mine = fleet(
            session, since=T0, until=T0 + timedelta(hours=10), now=T0, below=1, owner_id=bob
        )
    by_id = {r.user_id: r for r in rows}
    assert by_id[alice].gpu_hours == 5.0  # 2 GPUs x 2 h + 1 GPU x 1 h in the window
    assert by_id[alice].idle_gpu_hours == 2.0  # half of the 4 GPU-hours of the sampled run
    assert by_id[alice].util_mean == 40.0
    assert (by_id[alice].gpu_runs, by_id[alice].runs_waiting) == (2, 0)
    assert (by_id[bob].gpu_hours, by_id[bob].runs_waiting, by_id[bob].util_mean) == (0, 2, None)
    assert [(r.user_id, r.runs_waiting) for r in mine] == [(bob, 2)]
    with session_scope() as session:  # tidy: queued runs of the shared database
        session.execute(update(Run).where(Run.owner_id == bob).values(status=RunStatus.cancelled))


def test_gpu_figures_are_mean_nearest_rank_p95_and_peak_memory() -> None:
    owner = user_id(make_user()[0])
    run_id = ran(owner, "0", T0, T0 + timedelta(hours=1), [float(v) for v in range(100)])
    with session_scope() as session:
        assert gpu_efficiency.refresh(session, run_id=run_id) == 3
        assert gpu_efficiency.figures(session, run_id) == {
            gpu_efficiency.UTIL_MEAN: 49.5,
            gpu_efficiency.UTIL_P95: 95.0 - 1,  # rank 95 of 0..99
            gpu_efficiency.MEM_PEAK: 9900.0,
        }
        assert gpu_efficiency.refresh(session, run_id=run_id) == 3  # a step past its last


def test_idle_gpus_need_the_whole_stretch_below_the_threshold_and_fresh_samples() -> None:
    owner = user_id(make_user()[0])
    start = datetime.fromtimestamp(time.time() - 10, UTC)
    run_id = ran(owner, "0", start, None, [50, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    now = start.timestamp() + 10
    with session_scope() as session:
        found = [
            gpu_efficiency.idle_gpus(session, run_id=run_id, below=1, seconds=s, now=now)
            for s in (5, 9)
        ]
        stale = gpu_efficiency.idle_gpus(session, run_id=run_id, below=1, seconds=5, now=now + 1e4)
    assert found == [["gpu0"], []]  # idle from second 1 to 9: 8 s
    assert stale == []


def test_the_notice_reads_as_a_sentence() -> None:
    idle = {"gpus": ["gpu0"], "minutes": 30, "below": 1.0, "at": "2001-05-01T00:00:00+00:00"}
    [line] = notice_lines({"gpu_idle": idle})
    assert line.startswith("GPU idle: gpu0 below 1% utilisation for 30 minutes")


def test_fleet_page_and_api_show_a_member_only_their_own_row(client) -> None:
    name, password, headers = make_user()
    other = make_user()[0]
    admin = make_user(admin=True)[2]
    with session_scope() as session:
        waiting = add_run(session, owner_id=user_id(other), status="queued")
    r = client.get("/api/fleet", params={"window": "30d"}, headers=headers)
    assert r.status_code == 200, r.text
    assert [u["username"] for u in r.json()["users"]] == [name]
    everyone = client.get("/api/fleet", params={"window": "30d"}, headers=admin).json()["users"]
    assert {u["username"]: u["runs_waiting"] for u in everyone}[other] == 1
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == waiting).values(status=RunStatus.cancelled))
    assert client.get("/api/fleet", params={"window": "2d"}, headers=headers).status_code == 422
    login(client, name, password)
    page = client.get("/fleet?window=24h")
    assert page.status_code == 200
    assert f'data-user="{name}"' in page.text and 'id="nav-fleet"' in page.text
