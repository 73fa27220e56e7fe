"""app.gpus.service against real databases (a SQLite file, and PostgreSQL when
TORCHYARD_TEST_POSTGRES_URL is set): leases are taken atomically, serialized across
concurrent workers, expire without heartbeats, and the database refuses a GPU leased twice."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, delete, event, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

import app.models as models
from app.errors import Invalid
from app.gpus.leases import release_leases
from app.gpus.models import GpuLease, WorkerHost
from app.gpus.service import (
    SCHEDULER_LOCK_KEY,
    StartOutcome,
    StartResult,
    queue_reason,
    touch_host,
    try_start,
)
from app.runs.models import RunStatus
from app.runs.service import refuse_if_never_startable
from app.timeutil import as_utc, utcnow
from tests.databases import KINDS, own_database, rolled_back, savepoints_on
from tests.waits import wait_for

TTL = 15.0
STARVE = 300.0


@pytest.fixture(scope="module", params=KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with own_database(request.param, tmp_path_factory.mktemp("gpus"), "ty_gpus") as eng:
        yield eng


@pytest.fixture(scope="module")
def rollback_engine(engine: Engine) -> Iterator[Engine]:
    with savepoints_on(engine) as rollback:
        yield rollback


def clean_slate(maker: sessionmaker[Session]) -> None:
    """No queued runs, leases or hosts left by an earlier test."""
    with maker.begin() as s:
        s.execute(delete(GpuLease))
        s.execute(delete(WorkerHost))
        s.execute(
            update(models.Run)
            .where(models.Run.status == RunStatus.queued)
            .values(status=RunStatus.cancelled)
        )


@pytest.fixture
def sessions(rollback_engine: Engine) -> Iterator[sessionmaker[Session]]:
    """One test's units of work on one connection, rolled back after it."""
    with rolled_back(rollback_engine) as maker:
        clean_slate(maker)  # what the tests on committed_sessions left
        yield maker


@pytest.fixture
def committed_sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions on connections of their own, which commit: for the tests of concurrent
    workers, each a transaction on its own connection."""
    maker = sessionmaker(bind=engine, expire_on_commit=False)
    clean_slate(maker)
    return maker


def queued_runs(maker: sessionmaker[Session], *gpus: int, nodes: int = 1) -> list[int]:
    with maker.begin() as s:
        user = models.User(username=f"u-{secrets.token_hex(6)}", password_hash="-")
        s.add(user)
        s.flush()
        exp = models.Experiment(name="gpus", config={}, owner_id=user.id)
        s.add(exp)
        s.flush()
        runs = [
            models.Run(
                experiment_id=exp.id,
                owner_id=user.id,
                config={"recipe": "tiny_mlp", "resources": {"gpus": k, "nproc": 1, "nodes": nodes}},
                seed=0,
                created_at=utcnow() + timedelta(milliseconds=i),
            )
            for i, k in enumerate(gpus)
        ]
        s.add_all(runs)
        s.flush()
        return [r.id for r in runs]


def start(
    maker: sessionmaker[Session], run_id: int, host: str = "h", inventory: list[int] | None = None
) -> StartResult:
    with maker.begin() as s:
        return try_start(
            s,
            run_id=run_id,
            host=host,
            inventory=[0, 1] if inventory is None else inventory,
            lease_ttl_seconds=TTL,
            starvation_seconds=STARVE,
        )


def leases(maker: sessionmaker[Session]) -> list[tuple[str, int, int]]:
    with maker() as s:
        rows = s.execute(select(GpuLease.host, GpuLease.gpu_index, GpuLease.run_id))
        return sorted((h, i, r) for h, i, r in rows)


def test_a_run_takes_exactly_its_gpus_and_records_them(sessions) -> None:
    two, one = queued_runs(sessions, 2, 1)
    got = start(sessions, two)
    assert got.outcome is StartOutcome.STARTED and got.gpu_indices == (0, 1)
    assert leases(sessions) == [("h", 0, two), ("h", 1, two)]
    with sessions() as s:
        run = s.get(models.Run, two)
        assert run is not None
        assert (run.status, run.worker_host, run.gpu_indices) == ("running", "h", "0,1")
        assert run.started_at is not None
    waiting = start(sessions, one)
    assert waiting.outcome is StartOutcome.WAIT and "1 free GPUs" in waiting.reason
    with sessions.begin() as s:
        release_leases(s, run_id=two)
    assert start(sessions, one).gpu_indices == (0,)


def test_a_run_that_is_not_queued_any_more_is_gone(sessions) -> None:
    (run_id,) = queued_runs(sessions, 1)
    assert start(sessions, run_id).outcome is StartOutcome.STARTED
    assert start(sessions, run_id).outcome is StartOutcome.GONE  # a redelivered task does nothing


def test_gpu_free_runs_start_on_a_host_without_gpus(sessions) -> None:
    (run_id,) = queued_runs(sessions, 0)
    got = start(sessions, run_id, host="cpu-box", inventory=[])
    assert got.outcome is StartOutcome.STARTED and got.gpu_indices == ()
    assert leases(sessions) == []


def test_a_run_that_fits_only_on_another_live_host_waits_for_it(sessions) -> None:
    (run_id,) = queued_runs(sessions, 1)
    with sessions.begin() as s:
        touch_host(s, host="gpu-box", gpus=[0], now=utcnow())
    got = start(sessions, run_id, host="cpu-box", inventory=[])
    assert got.outcome is StartOutcome.WAIT and "gpu-box" in got.reason
    assert start(sessions, run_id, host="gpu-box", inventory=[0]).outcome is StartOutcome.STARTED


def test_stale_leases_expire_and_fresh_ones_do_not(sessions) -> None:
    dead, alive, waiting = queued_runs(sessions, 1, 1, 1)
    assert start(sessions, dead).gpu_indices == (0,)
    assert start(sessions, alive).gpu_indices == (1,)
    with sessions.begin() as s:
        s.execute(
            update(GpuLease)
            .where(GpuLease.run_id == dead)
            .values(heartbeat_at=utcnow() - timedelta(seconds=TTL + 1))
        )
    assert start(sessions, waiting).gpu_indices == (0,)
    assert leases(sessions) == [("h", 0, waiting), ("h", 1, alive)]


def test_the_database_refuses_a_gpu_leased_twice(sessions) -> None:
    a, b = queued_runs(sessions, 1, 1)
    with pytest.raises(IntegrityError):
        with sessions.begin() as s:
            s.add(GpuLease(host="h", gpu_index=0, run_id=a))
            s.add(GpuLease(host="h", gpu_index=0, run_id=b))
    assert leases(sessions) == []


class LockTaken:
    """Notes the threads that sent the statement taking the scheduler's lock (PostgreSQL's
    advisory lock, SQLite's first write), which waits while another transaction holds it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.threads: set[int] = set()
        event.listen(engine, "before_cursor_execute", self.seen)

    def seen(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        words = statement.lstrip().upper()
        if "PG_ADVISORY_XACT_LOCK" in words or words.startswith(("INSERT", "UPDATE")):
            self.threads.add(threading.get_ident())

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self.seen)


def test_concurrent_workers_never_lease_a_gpu_twice(committed_sessions) -> None:
    runs = queued_runs(committed_sessions, *([1] * 6))
    barrier = threading.Barrier(len(runs))
    results: dict[int, StartResult | BaseException] = {}

    def worker(run_id: int) -> None:
        barrier.wait()
        try:
            results[run_id] = start(committed_sessions, run_id)
        except BaseException as exc:  # an IntegrityError would mean the lock did not hold
            results[run_id] = exc

    threads = [threading.Thread(target=worker, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(isinstance(r, StartResult) for r in results.values()), results
    started = {r: res for r, res in results.items() if res.outcome is StartOutcome.STARTED}  # type: ignore[union-attr]
    # The first two in queue order, whichever thread got the lock first.
    assert sorted(started) == runs[:2]
    assert sorted(res.gpu_indices for res in started.values()) == [(0,), (1,)]  # type: ignore[union-attr]
    assert len(leases(committed_sessions)) == 2


def test_a_start_that_waited_for_a_finish_is_recorded_after_it(
    committed_sessions, engine: Engine
) -> None:
    """A start that waited for the scheduler's lock while the run before it finished records
    its start after that finish: it used to record the time it began, before the wait, so two
    runs' times showed one GPU held twice although the second started after the first ended
    (seen in CI, tests/test_gpu_leases.py, on PostgreSQL)."""
    first, second = queued_runs(committed_sessions, 2, 1)
    assert start(committed_sessions, first).outcome is StartOutcome.STARTED
    result: dict[str, StartResult] = {}
    with committed_sessions.begin() as s:
        # Hold the scheduler's lock: PostgreSQL's advisory lock, SQLite's one write lock.
        if s.get_bind().dialect.name == "postgresql":
            s.execute(select(func.pg_advisory_xact_lock(SCHEDULER_LOCK_KEY)))
        s.execute(update(models.Run).where(models.Run.id == first).values(heartbeat_at=utcnow()))
        waiting = threading.Thread(
            target=lambda: result.update(got=start(committed_sessions, second))
        )
        locking = LockTaken(engine)
        try:
            waiting.start()
            # The second start is under way: it sent the statement that waits for the lock.
            wait_for(lambda: waiting.ident in locking.threads, timeout=30, what="its start")
        finally:
            locking.close()
        s.execute(
            update(models.Run)
            .where(models.Run.id == first)
            .values(status=RunStatus.succeeded, finished_at=utcnow())
        )
        release_leases(s, run_id=first)
    waiting.join(60)
    assert result["got"].outcome is StartOutcome.STARTED
    with committed_sessions() as s:
        finished_at = s.get_one(models.Run, first).finished_at
        started_at = s.get_one(models.Run, second).started_at
    assert finished_at is not None and started_at is not None
    assert as_utc(started_at) >= as_utc(finished_at)


# --- multi-node runs: every node's GPUs in one decision or none ---------------------------


def live_hosts(maker: sessionmaker[Session], **gpus: list[int]) -> None:
    with maker.begin() as s:
        for host, indices in gpus.items():
            touch_host(s, host=host, gpus=indices, now=utcnow())


def test_a_multi_node_run_leases_every_nodes_gpus_in_the_transaction_that_starts_it(
    sessions,
) -> None:
    (gang,) = queued_runs(sessions, 2, nodes=2)
    live_hosts(sessions, a=[0, 1], b=[0, 1], c=[0])
    assert start(sessions, gang, host="c", inventory=[0]).outcome is StartOutcome.WAIT
    assert leases(sessions) == []
    got = start(sessions, gang, host="b")
    assert got.outcome is StartOutcome.STARTED and got.nodes == (("b", (0, 1)), ("a", (0, 1)))
    assert leases(sessions) == [("a", 0, gang), ("a", 1, gang), ("b", 0, gang), ("b", 1, gang)]
    with sessions() as s:
        run = s.get_one(models.Run, gang)
        assert (run.status, run.worker_host, run.gpu_indices) == ("running", "b", "0,1")
    with sessions.begin() as s:
        release_leases(s, run_id=gang)
    assert leases(sessions) == []


def test_a_workers_address_is_kept_with_its_host(sessions) -> None:
    (run_id,) = queued_runs(sessions, 0)
    with sessions.begin() as s:
        touch_host(s, host="a", gpus=[], now=utcnow(), address="10.0.0.5")
    with sessions.begin() as s:
        try_start(
            s,
            run_id=run_id,
            host="b",
            inventory=[],
            lease_ttl_seconds=TTL,
            starvation_seconds=STARVE,
            address="10.0.0.6",
        )
    with sessions() as s:
        hosts = {h.host: h.address for h in s.scalars(select(WorkerHost))}
    assert hosts == {"a": "10.0.0.5", "b": "10.0.0.6"}


def test_a_waiting_multi_node_run_holds_nothing_and_names_what_each_host_lacks(sessions) -> None:
    (single,), (gang,) = queued_runs(sessions, 1), queued_runs(sessions, 2, nodes=2)
    live_hosts(sessions, a=[0, 1], b=[0, 1])
    assert start(sessions, single, host="a").gpu_indices == (0,)
    for host in ("a", "b"):
        got = start(sessions, gang, host=host)
        assert got.outcome is StartOutcome.WAIT and got.reason == (
            "waiting for 2 hosts with 2 free GPUs each: a: 1 of 2 free, needs 1 more"
        )
    assert leases(sessions) == [("a", 0, single)]
    with sessions() as s:
        reason = queue_reason(
            s, run_id=gang, now=utcnow(), lease_ttl_seconds=TTL, starvation_seconds=STARVE
        )
    assert reason == "waiting for 2 hosts with 2 free GPUs each: a: 1 of 2 free, needs 1 more"


def test_two_two_node_runs_at_once_on_two_hosts_of_two_gpus_never_both_partly_leased(
    committed_sessions,
) -> None:
    """Both runs' tasks asked from both hosts at the same moment, round after round: at any
    commit each run holds all 4 of its GPUs or none, one runs at a time, then the other."""
    first, second = queued_runs(committed_sessions, 2, 2, nodes=2)
    live_hosts(committed_sessions, a=[0, 1], b=[0, 1])
    order: list[int] = []
    for _round in range(2):
        asks = [(run_id, host) for run_id in (first, second) for host in ("a", "b")]
        barrier = threading.Barrier(len(asks))
        results: list[tuple[int, StartResult | BaseException]] = []

        def ask(
            run_id: int,
            host: str,
            barrier: threading.Barrier,
            results: list[tuple[int, StartResult | BaseException]],
        ) -> None:
            barrier.wait()
            try:
                results.append((run_id, start(committed_sessions, run_id, host=host)))
            except BaseException as exc:  # an IntegrityError would mean the lock did not hold
                results.append((run_id, exc))

        threads = [threading.Thread(target=ask, args=(*a, barrier, results)) for a in asks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(isinstance(r, StartResult) for _, r in results), results
        started = [r for r, res in results if res.outcome is StartOutcome.STARTED]  # type: ignore[union-attr]
        assert len(started) == 1, results
        order += started
        held = leases(committed_sessions)
        assert {(h, i) for h, i, r in held if r == started[0]} == {
            ("a", 0),
            ("a", 1),
            ("b", 0),
            ("b", 1),
        }
        assert len(held) == 4  # the other holds none while it waits
        with committed_sessions.begin() as s:  # it finishes: its GPUs are free again
            s.execute(
                update(models.Run)
                .where(models.Run.id == started[0])
                .values(status=RunStatus.succeeded, finished_at=utcnow())
            )
            release_leases(s, run_id=started[0])
    assert order == [first, second]  # submit order, and both ran


def test_a_new_multi_node_run_is_refused_only_when_no_live_hosts_could_hold_it(sessions) -> None:
    with sessions() as s:
        touch_host(s, host="a", gpus=[0, 1], now=utcnow())
        touch_host(s, host="b", gpus=[0, 1], now=utcnow())
        # two hosts of 2: a 2-node run of 2 GPUs each fits, and is not refused
        fits = {"recipe": "tiny_mlp", "resources": {"nodes": 2, "gpus": 2}}
        refuse_if_never_startable(s, config=fits, loc=("body",))
        never = {"recipe": "tiny_mlp", "resources": {"nodes": 3, "gpus": 2}}
        with pytest.raises(Invalid) as caught:
            refuse_if_never_startable(s, config=never, loc=("body",))
    assert "needs 3 hosts with 2 GPUs each" in str(caught.value)
