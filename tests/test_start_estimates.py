"""Estimated starts (app.gpus.start_estimates) on real databases (a SQLite file, and
PostgreSQL when TORCHYARD_TEST_POSTGRES_URL is set): running runs whose ends come from their
progress, time limit or history, a queue of 10 behind 2 running ones, the scheduler's own
order (priority first), and no estimate rather than a wrong one."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

import app.models as models
from app.gpus.estimate import FREE_NOW, Fleet, Holder, Length, simulate, steady_mark
from app.gpus.models import GpuLease, WorkerHost
from app.gpus.scheduler import FairShare, QueuedRun
from app.gpus.service import touch_host, try_start
from app.gpus.start_estimates import estimated_starts
from app.metrics.models import Metric, MetricKey
from app.runs.models import RunStatus
from app.settings_pools import LOCAL_POOL
from app.timeutil import as_utc, utcnow
from tests.databases import KINDS, own_database, rolled_back, savepoints_on

TTL = 15.0
STARVE = 3600.0


@pytest.fixture(scope="module", params=KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with own_database(request.param, tmp_path_factory.mktemp("est"), "ty_estimates") as eng:
        yield eng


@pytest.fixture
def sessions(engine: Engine) -> Iterator[sessionmaker[Session]]:
    with savepoints_on(engine) as rollback, rolled_back(rollback) as maker:
        with maker.begin() as s:
            s.execute(delete(GpuLease))
            s.execute(delete(WorkerHost))
            s.execute(
                update(models.Run)
                .where(models.Run.status.in_([RunStatus.queued, RunStatus.running]))
                .values(status=RunStatus.cancelled)
            )
        yield maker


def experiment(maker: sessionmaker[Session]) -> tuple[int, int]:
    with maker.begin() as s:
        user = models.User(username=f"u-{secrets.token_hex(6)}", password_hash="-")
        s.add(user)
        s.flush()
        exp = models.Experiment(name="est", config={}, owner_id=user.id)
        s.add(exp)
        s.flush()
        return user.id, exp.id


def add_runs(
    maker: sessionmaker[Session],
    owner: tuple[int, int],
    n: int,
    *,
    gpus: int = 1,
    params: dict[str, Any] | None = None,
    time_limit: int | None = None,
    priority: int = 0,
    status: RunStatus = RunStatus.queued,
    now: datetime | None = None,
) -> list[int]:
    now = now or utcnow()
    resources: dict[str, Any] = {"gpus": gpus, "nproc": 1}
    if time_limit is not None:
        resources["time_limit_minutes"] = time_limit
    with maker.begin() as s:
        runs = [
            models.Run(
                experiment_id=owner[1],
                owner_id=owner[0],
                status=status,
                priority=priority,
                config={"recipe": "tiny_mlp", "params": params or {}, "resources": resources},
                seed=0,
                created_at=now + timedelta(milliseconds=i),
                task_seen_at=now,  # its message came by: not taken as lost
            )
            for i in range(n)
        ]
        s.add_all(runs)
        s.flush()
        return [r.id for r in runs]


def history(maker: sessionmaker[Session], owner: tuple[int, int], *seconds: float) -> None:
    """Succeeded runs of the experiment, each `seconds` long."""
    end = utcnow() - timedelta(hours=1)
    ids = add_runs(maker, owner, len(seconds), status=RunStatus.succeeded)
    with maker.begin() as s:
        for run_id, length in zip(ids, seconds, strict=True):
            s.execute(
                update(models.Run)
                .where(models.Run.id == run_id)
                .values(started_at=end - timedelta(seconds=length), finished_at=end)
            )


def start_on(maker: sessionmaker[Session], run_id: int, inventory: list[int]) -> None:
    with maker.begin() as s:
        result = try_start(
            s,
            run_id=run_id,
            host="h",
            inventory=inventory,
            lease_ttl_seconds=TTL,
            starvation_seconds=STARVE,
        )
    assert result.gpu_indices, result


def steps(
    maker: sessionmaker[Session],
    run_id: int,
    last: int,
    pace: float,
    at: float,
    key: str = "train/loss",
) -> None:
    """`key` at steps 1..`last`, one each `pace` seconds, the last at unix time `at`."""
    with maker.begin() as s:
        key_id = s.scalar(
            insert(MetricKey)
            .values(run_id=run_id, key=key, last_step=last, last_value=0.1)
            .returning(MetricKey.id)
        )
        s.execute(
            insert(Metric),
            [
                {"key_id": key_id, "step": i, "value": 0.1, "wall_time": at - (last - i) * pace}
                for i in range(1, last + 1)
            ],
        )


def started_at(maker: sessionmaker[Session], run_id: int) -> datetime:
    with maker() as s:
        run = s.get(models.Run, run_id)
        assert run is not None and run.started_at is not None
        return as_utc(run.started_at)


def estimates(maker: sessionmaker[Session], ids: list[int], now: datetime) -> dict[int, Any]:
    with maker() as s:
        return estimated_starts(
            s, run_ids=ids, now=now, lease_ttl_seconds=TTL, starvation_seconds=STARVE
        )


def offsets(found: dict[int, Any], ids: list[int], now: datetime) -> list[float | None]:
    return [
        None if found[i].start is None else round((as_utc(found[i].start) - now).total_seconds())
        for i in ids
    ]


def test_queue_of_ten_behind_two_running_runs(sessions: sessionmaker[Session]) -> None:
    owner = experiment(sessions)
    history(sessions, owner, 20.0, 30.0, 45.0)  # the queued runs' length: the median, 30 s
    total = {"epochs": 2, "steps_per_epoch": 50}  # 100 steps
    a, b = add_runs(sessions, owner, 2, params=total, now=utcnow() - timedelta(minutes=5))
    start_on(sessions, a, [0, 1])
    start_on(sessions, b, [0, 1])
    queued = add_runs(sessions, owner, 10, params=total)
    now = utcnow()
    steps(sessions, a, 50, 1.0, now.timestamp())  # 50 left at 1 s: ends in 50 s
    steps(sessions, b, 80, 2.0, now.timestamp())  # 20 left at 2 s: ends in 40 s
    # The worker's samples (step: their number) are no progress, however high their step.
    steps(sessions, a, 90, 5.0, now.timestamp(), key="sys/cpu_percent")
    found = estimates(sessions, queued, now)
    # Their ends weighed by the share done against the history's (30 s from their start,
    # now): a at 30 + 50% x 20 = 40, b at 30 + 80% x 10 = 38. Two GPUs, each queued run
    # 30 s: b's GPU at 38, a's at 40, then each 30 s later.
    assert offsets(found, queued, now) == [38, 40, 68, 70, 98, 100, 128, 130, 158, 160]
    weighed = "weighed {}% against its experiment's median, 30 s"
    assert found[queued[0]].basis == (
        f"when run {b} ends (its progress: step 80 of 100; {weighed.format(80)})"
    )
    assert found[queued[1]].basis == (
        f"when run {a} ends (its progress: step 50 of 100; {weighed.format(50)})"
    )
    assert found[queued[2]].basis.startswith(f"when run {queued[0]} ends (the median length")


def test_early_on_a_runs_pace_is_weighed_against_its_experiments_pace(
    sessions: sessionmaker[Session],
) -> None:
    """Its experiment's runs took 60 s, 40 of them start-up (imports: they swing with the
    box's load) and 100 steps at 0.2 s. A run at step 20 of 100 at 0.3 s a step has its pace
    weighed 20% against 0.2 s: 80 steps x 0.22 s = 17.6 s left. Weighing its end against the
    history's whole length (start + 60 s) carried the history's start-up into a run past its
    own, and said 53 s (bench/start_estimate.py: +27% on a loaded box)."""
    owner = experiment(sessions)
    total = {"total_steps": 100}
    done_at = utcnow() - timedelta(hours=1)
    past = add_runs(sessions, owner, 3, params=total, status=RunStatus.succeeded)
    with sessions.begin() as s:
        s.execute(
            update(models.Run)
            .where(models.Run.id.in_(past))
            .values(started_at=done_at - timedelta(seconds=60), finished_at=done_at)
        )
    for run_id in past:
        steps(sessions, run_id, 100, 0.2, done_at.timestamp())
    (a,) = add_runs(sessions, owner, 1, params=total)
    start_on(sessions, a, [0])
    (queued,) = add_runs(sessions, owner, 1, params=total)
    now = utcnow()
    steps(sessions, a, 20, 0.3, now.timestamp())
    found = estimates(sessions, [queued], now)
    assert offsets(found, [queued], now) == [18]
    assert found[queued].basis == (
        f"when run {a} ends (its progress: step 20 of 100 (its pace weighed 20% against its "
        "experiment's, 0.2 s a step))"
    )


def test_the_schedulers_order_priority_first(sessions: sessionmaker[Session]) -> None:
    owner = experiment(sessions)
    (running,) = add_runs(sessions, owner, 1, time_limit=10)
    start_on(sessions, running, [0])
    low = add_runs(sessions, owner, 1, time_limit=5)
    high = add_runs(sessions, owner, 1, time_limit=5, priority=5)
    now = utcnow()
    found = estimates(sessions, low + high, now)
    started = started_at(sessions, running)
    assert found[high[0]].start == started + timedelta(minutes=10)
    assert found[low[0]].start == started + timedelta(minutes=15)
    assert found[high[0]].basis == f"when run {running} ends (its time limit, 10 min)"


def test_no_estimate_behind_a_run_of_unknown_length(sessions: sessionmaker[Session]) -> None:
    owner = experiment(sessions)
    (running,) = add_runs(sessions, owner, 1)  # no progress, no limit, no history
    start_on(sessions, running, [0])
    queued = add_runs(sessions, owner, 2, time_limit=5)
    huge = add_runs(sessions, owner, 1, gpus=4)
    found = estimates(sessions, queued + huge, utcnow())
    for run_id in queued:
        assert found[run_id].start is None
        assert found[run_id].basis == f"no estimate: run {running} has no known length"
    assert found[huge[0]].start is None
    assert found[huge[0]].basis.startswith("no estimate: needs 4 GPUs on one host")


def test_free_now_and_epoch_progress(sessions: sessionmaker[Session]) -> None:
    owner = experiment(sessions)
    with sessions.begin() as s:
        touch_host(s, host="h", gpus=[0, 1], now=utcnow())
    (running,) = add_runs(sessions, owner, 1, params={"epochs": 4})
    start_on(sessions, running, [0, 1])
    (first, second) = add_runs(sessions, owner, 2, time_limit=10)
    began = started_at(sessions, running)
    with sessions.begin() as s:
        s.execute(
            update(models.Run)
            .where(models.Run.id == running)
            .values(training_started_at=began - timedelta(seconds=100))
        )
        key = s.scalar(
            insert(MetricKey)
            .values(run_id=running, key="epoch", last_step=7, last_value=1.0)
            .returning(MetricKey.id)
        )
        at = (began - timedelta(seconds=100) + timedelta(seconds=50)).timestamp()
        s.execute(insert(Metric), [{"key_id": key, "step": 7, "value": 1.0, "wall_time": at}])
    now = utcnow()
    found = estimates(sessions, [first, second], now)
    assert found[first].start == now  # GPU 1 is free
    assert found[first].basis == "its GPUs are free now"
    # Epoch 1 of 4 after 50 s of training: 200 s in all, from its training start.
    expected = began - timedelta(seconds=100) + timedelta(seconds=200)
    assert found[second].start is not None
    assert abs((as_utc(found[second].start) - max(expected, now)).total_seconds()) < 0.01
    assert found[second].basis == f"when run {running} ends (its progress: epoch 1 of 4)"
    with sessions() as s:
        assert s.scalar(select(models.Run.status).where(models.Run.id == first)) == "queued"


def test_the_replay_charges_fair_share_as_it_starts_runs() -> None:
    """Alice queued two runs before Bob's two, one GPU, equal usage: the scheduler alternates
    (each run taken charges its owner), and so must the replay, decision after decision. It
    took fair share's usage as it was at the start: Alice's second run tied with Bob's first
    and, older, was estimated to go before it."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    alice, bob = 1, 2
    queue = [
        QueuedRun(id=i, gpus=1, priority=0, created_at=now + timedelta(seconds=i), owner_id=owner)
        for i, owner in ((11, alice), (12, alice), (13, bob), (14, bob))
    ]
    holder = Holder(10, (("box", 0),), now + timedelta(seconds=10), "its time limit")
    fleet = Fleet(
        free={"box": []},
        pools={"box": LOCAL_POOL},
        capacity={"box": 1},
        fair=FairShare(usage={alice: 0.0, bob: 0.0}, charge={alice: 1.0, bob: 1.0}),
    )
    lengths = {i: Length(10.0, "history") for i in (11, 12, 13, 14)}
    found = simulate(queue, [holder], lengths, fleet, now, starvation_seconds=10**9)
    starts = {i: (e.start - now).total_seconds() for i, e in found.items() if e.start}
    assert starts == {11: 10.0, 13: 20.0, 12: 30.0, 14: 40.0}, starts


def test_a_steady_mark_holds_while_an_estimate_only_follows_the_clock() -> None:
    """What a live page compares (app/gpus/estimate.py steady_mark): the same over seconds of
    clock for a start free now or eleven minutes ahead; a new mark when the start moves by more
    than its grain (a tenth of the wait), or when it has no time."""
    now = datetime(2026, 12, 7, 12, 0, 3, tzinfo=UTC)
    marks = {str(steady_mark(now + timedelta(seconds=s), FREE_NOW, now)) for s in range(5)}
    assert marks == {str([FREE_NOW])}
    ahead = now + timedelta(minutes=11)
    basis = "when run 1 ends (its progress: step 40 of 100)"
    held = steady_mark(ahead, basis, now)
    assert all(steady_mark(ahead, basis, now + timedelta(seconds=s)) == held for s in range(5))
    assert steady_mark(ahead + timedelta(seconds=61), basis, now) != held
    assert steady_mark(None, "no estimate: run 1 has no known length", now) == [
        "no estimate: run 1 has no known length"
    ]
