"""Fair share between users (issue 42) through the real scheduling service: runs queued with
app.runs.service, started by app.gpus.service.try_start (leases, lifecycle) and finished by
app.runs.state.lifecycle.finish on a real database, driven by a controlled clock so that a
day of one-hour runs takes seconds. The worker's own loop is the end-to-end test
(tests/test_fair_share_worker.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from app.db import session_scope
from app.gpus import leases
from app.gpus.fairshare import decayed_hours, shares, weight_of
from app.gpus.scheduler import FairShare, QueuedRun, pick, queue_order
from app.gpus.service import StartOutcome, queue_reasons, try_start
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle
from app.settings import get_settings
from app.timeutil import utcnow
from app.users.service import set_share_weight
from tests.conftest import make_user
from tests.test_gpu_panel import (
    NEVER_STARVES,
    TTL,
    Made,
    host,
    queue_run,
    queued_world,
    start_on,
    user_named,
)
from tests.test_pages import login

RUN = timedelta(hours=1)  # every run's length


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    monkeypatch.setenv("TORCHYARD_FAIR_SHARE_HALF_LIFE_HOURS", "24")
    yield from queued_world(monkeypatch)


@dataclass
class Box:
    """One host of two GPUs, a clock, and who held a GPU when: (owner, start, end)."""

    made: Made
    host: str
    now: datetime
    running: dict[int, datetime] = field(default_factory=dict)  # run -> its end
    held: list[tuple[str, datetime, datetime]] = field(default_factory=list)
    owners: dict[int, str] = field(default_factory=dict)

    def submit(self, username: str, count: int) -> None:
        for _ in range(count):
            run_id = queue_run(self.made, username, gpus=1)
            self.owners[run_id] = username

    def step(self) -> None:
        """At `now`: the runs due end, then every queued run asks to start (as a worker's
        retries would, in submit order) until both GPUs are held (an ask then waits: nothing
        is free till the clock moves), then the clock moves to the next end."""
        with session_scope() as session:
            for run_id in list(self.running):
                leases.heartbeat_leases(session, run_id=run_id, now=self.now)
                if self.running[run_id] <= self.now:
                    run = session.get(Run, run_id)
                    assert run is not None
                    lifecycle.finish(
                        session,
                        run_id=run_id,
                        attempt=run.attempt,
                        status=RunStatus.succeeded,
                        exit_code=0,
                        error=None,
                        now=self.now,
                    )
                    del self.running[run_id]
        for run_id in sorted(set(self.owners) - set(self.running) - self.done()):
            if len(self.running) == 2:
                break
            with session_scope() as session:
                got = try_start(
                    session,
                    run_id=run_id,
                    host=self.host,
                    inventory=[0, 1],
                    lease_ttl_seconds=TTL,
                    starvation_seconds=NEVER_STARVES,
                    now=self.now,
                )
            if got.outcome is StartOutcome.STARTED:
                self.running[run_id] = self.now + RUN
                self.held.append((self.owners[run_id], self.now, self.now + RUN))
        assert len(self.running) <= 2
        if self.running:
            self.now = min(self.running.values())

    def done(self) -> set[int]:
        with session_scope() as session:
            return set(
                session.scalars(
                    select(Run.id).where(
                        Run.id.in_(list(self.owners)), Run.status == RunStatus.succeeded
                    )
                )
            )

    def run_all(self) -> None:
        for _ in range(200):
            self.step()
            if not self.running:
                return
        raise AssertionError("the queue never drained")

    def split(self, since: datetime, until: datetime) -> dict[str, float]:
        """GPU-hours per user inside [since, until)."""
        out: dict[str, float] = {}
        for owner, start, end in self.held:
            overlap = (min(end, until) - max(start, since)).total_seconds() / 3600
            if overlap > 0:
                out[owner] = out.get(owner, 0.0) + overlap
        return out


def box(made: Made) -> Box:
    return Box(made=made, host=host(made, [0, 1]), now=utcnow() + timedelta(seconds=1))


def contended(b: Box, users: list[str]) -> tuple[datetime, datetime]:
    """From the end of the first two runs to the first moment one user has nothing left."""
    first = sorted(end for _, _, end in b.held)[1]
    last_start = {u: max(s for o, s, _ in b.held if o == u) for u in users}
    return first, min(last_start.values())


def check_windows(b: Box, users: list[str], ratio: float, width: timedelta) -> None:
    """In every window of `width` inside the contended span, users[0]'s GPU time over
    users[1]'s is `ratio` within 15%."""
    since, until = contended(b, users)
    assert until - since >= width, (since, until)
    windows: list[float] = []
    t = since
    while t + width <= until:
        got = b.split(t, t + width)
        share = got.get(users[0], 0.0) / (got.get(users[0], 0.0) + got.get(users[1], 0.0))
        want = ratio / (1 + ratio)
        assert abs(share - want) <= 0.15 * want, (t - since, got)
        windows.append(share)
        t += RUN
    print(f"{users[0]}'s share in each window of {width}: {[round(w, 2) for w in windows]}")


def two_users(made: Made, weights: tuple[float, float] | None) -> tuple[Box, list[str]]:
    a, b = make_user()[0], make_user()[0]
    if weights is not None:
        with session_scope() as session:
            for name, weight in zip((a, b), weights, strict=True):
                set_share_weight(session, user=user_named(session, name), weight=weight)
    world = box(made)
    world.submit(a, 20)  # a submits first: without fair share a would hold both GPUs
    world.submit(b, 20)
    world.run_all()
    return world, [a, b]


def test_equal_weights_split_the_gpus_evenly(made: Made) -> None:
    world, users = two_users(made, (1, 1))
    check_windows(world, users, 1.0, width=4 * RUN)
    assert len(world.held) == 40


def test_weights_two_to_one_split_two_to_one(made: Made) -> None:
    world, users = two_users(made, (2, 1))
    check_windows(world, users, 2.0, width=6 * RUN)


def test_a_user_alone_gets_every_gpu(made: Made) -> None:
    world = box(made)
    alone = make_user()[0]
    world.submit(alone, 6)
    world.run_all()
    # Three rounds of two: both GPUs busy the whole time.
    assert world.split(world.held[0][1], world.now) == {alone: 6.0}
    assert world.now - world.held[0][1] == 3 * RUN


def test_without_fair_share_the_first_submitter_holds_the_box(
    made: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHYARD_FAIR_SHARE_HALF_LIFE_HOURS", "0")
    get_settings.cache_clear()
    a, b = make_user()[0], make_user()[0]
    world = box(made)
    world.submit(a, 4)
    world.submit(b, 4)
    world.run_all()
    assert [o for o, *_ in world.held[:4]] == [a, a, a, a]


# --- the pure order (app.gpus.scheduler) ------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def queued(run_id: int, owner: int, *, priority: int = 0, age: float = 0.0) -> QueuedRun:
    created = T0 - timedelta(seconds=age) + timedelta(microseconds=run_id)
    return QueuedRun(id=run_id, gpus=1, priority=priority, created_at=created, owner_id=owner)


def test_equal_priorities_go_by_effective_usage_and_each_start_charges_its_owner() -> None:
    fair = FairShare(usage={1: 3.0, 2: 1.0}, charge={1: 1.0, 2: 1.0})
    runs = [queued(1, 1), queued(2, 1), queued(3, 2), queued(4, 2), queued(5, 2)]
    # 2 is behind by 2 GPU-h: two of its runs go first, then they alternate.
    assert [r.id for r in queue_order(runs, fair)] == [3, 4, 1, 5, 2]
    assert [r.id for r in queue_order(runs)] == [1, 2, 3, 4, 5]  # fair share off


def test_priority_beats_fair_share() -> None:
    fair = FairShare(usage={1: 100.0, 2: 0.0}, charge={1: 1.0, 2: 1.0})
    runs = [queued(1, 2), queued(2, 1, priority=5)]
    assert [r.id for r in queue_order(runs, fair)] == [2, 1]
    decision = pick(runs, {"h": [0]}, T0, 300.0, fair=fair)
    assert list(decision.starts) == [2]


def test_a_starving_run_still_blocks_backfill_under_fair_share() -> None:
    """The heavy user's big run waited past starvation: the light user's small run, first in
    fair share's line otherwise, does not take the free GPU past it."""
    fair = FairShare(usage={1: 0.0, 2: 50.0}, charge={1: 1.0, 2: 1.0})
    big = QueuedRun(id=1, gpus=2, priority=0, created_at=T0 - timedelta(hours=1), owner_id=2)
    small = queued(2, 1)
    decision = pick([big, small], {"h": [0]}, T0, 300.0, fair=fair)
    assert decision.starts == {} and "waited too long" in decision.waiting[2]
    # Not starving yet: fair share puts the light user's run first and it backfills.
    decision = pick([big, small], {"h": [0]}, T0, 7200.0, fair=fair)
    assert list(decision.starts) == [2]


# --- what users see: the queue reason, the GPU page, the API ------------------------------------


def test_the_reason_and_the_gpu_page_say_each_users_share_and_place(made: Made, client) -> None:
    heavy, light = make_user()[0], make_user()[0]
    name = host(made, [0])
    first = queue_run(made, heavy, gpus=1)
    assert start_on(first, name, [0]).outcome is StartOutcome.STARTED
    heavy_waits = queue_run(made, heavy, gpus=1)
    light_waits = queue_run(made, light, gpus=1)
    with session_scope() as session:
        reasons = queue_reasons(
            session,
            run_ids=[heavy_waits, light_waits],
            now=utcnow(),
            lease_ttl_seconds=TTL,
            starvation_seconds=NEVER_STARVES,
        )
    # heavy's running run is charged its expected length from its start: heavy is ahead.
    assert re.search(
        rf"fair share: {light} used 0\.0 GPU-h \(weight 1\) vs {heavy} [0-9.]+ \(weight 1\)",
        reasons[light_waits],
    ), reasons
    assert reasons[light_waits].endswith("— 1st in line"), reasons
    assert reasons[heavy_waits].endswith("— 2nd in line"), reasons
    assert reasons[heavy_waits].startswith("waiting for 1 free GPUs on one host; fair share")

    admin, password, headers = make_user(admin=True)
    login(client, admin, password)
    page = client.get("/gpus")
    assert page.status_code == 200 and 'id="fair-share-table"' in page.text
    assert f'<tr data-user="{heavy}">' in page.text
    with session_scope() as session:
        heavy_id = user_named(session, heavy).id
    token = client.cookies.get("ty_csrf") or ""
    page = client.post(
        "/gpus/share-weight",
        data={"user_id": str(heavy_id), "weight": "0", "csrf_token": token},
        headers={"X-CSRF-Token": token},
    )
    assert page.status_code == 422 and "weight: must be a number greater than 0" in page.text
    set_weight = client.put(
        f"/api/fair-share/users/{heavy_id}", json={"weight": 4}, headers=headers
    )
    assert set_weight.status_code == 200 and set_weight.json()["weight"] == 4
    bad = client.put(f"/api/fair-share/users/{heavy_id}", json={"weight": -1}, headers=headers)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "weight"]
    table = {
        u["username"]: u for u in client.get("/api/fair-share", headers=headers).json()["users"]
    }
    assert table[heavy]["weight"] == 4 and table[heavy]["own_weight"] == 4
    assert table[light]["weight"] == 1 and table[light]["own_weight"] is None
    # Shares among those running or waiting (others of the shared database too): 4 : 1.
    assert table[heavy]["share"] == pytest.approx(4 * table[light]["share"], abs=1e-3)


def test_an_hour_one_half_life_ago_counts_half() -> None:
    hour = timedelta(hours=1)
    assert decayed_hours(T0 - hour, T0, T0, 1e9) == pytest.approx(1.0, rel=1e-6)
    day_ago = T0 - timedelta(hours=24)
    assert decayed_hours(day_ago - hour / 1000, day_ago, T0, 24.0) == pytest.approx(
        0.5 / 1000, rel=1e-3
    )


def test_a_roles_weight_applies_unless_the_user_has_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHYARD_FAIR_SHARE_ROLE_WEIGHTS", '{"admin": 3}')
    get_settings.cache_clear()
    try:
        admin, member = make_user(admin=True)[0], make_user()[0]
        with session_scope() as session:
            assert weight_of(user_named(session, admin)) == 3
            assert weight_of(user_named(session, member)) == 1
            set_share_weight(session, user=user_named(session, admin), weight=0.5)
            assert weight_of(user_named(session, admin)) == 0.5
            by_user = shares(session, now=utcnow())
            assert by_user[user_named(session, admin).id].own_weight == 0.5
    finally:
        monkeypatch.delenv("TORCHYARD_FAIR_SHARE_ROLE_WEIGHTS")
        get_settings.cache_clear()
