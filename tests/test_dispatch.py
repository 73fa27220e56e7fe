"""Queue reconciliation on a real database (app.runs.state.dispatch): a queued run whose task has
not come by a worker for queue_resend_seconds is sent again once, with a new dispatch number, and
its older message is dropped on delivery. The messages go to kombu's in-memory broker, read
back here as a worker would take them. The live faults (a flushed broker, a killed worker) are
tests/test_queue_faults.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from app import db, settings
from app.auth.models import User
from app.broker import RUN_TASK, celery_app, pool_queue
from app.broker_queue import RunMessage
from app.experiments.models import Experiment
from app.gpus.service import touch_host
from app.runs.models import Run
from app.runs.state.dispatch import current_message, resend_lost, surplus
from app.runs.state.lifecycle import queue
from app.timeutil import utcnow
from tests.conftest import DATABASE_URL
from tests.databases import own_database

KIND = "postgresql" if DATABASE_URL.startswith("postgresql") else "sqlite"


@pytest.fixture
def own_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """This process on a database of its own, re-sending after 30 s."""
    with own_database(KIND, tmp_path, "ty_dispatch") as engine:
        monkeypatch.setenv("TORCHYARD_DATABASE_URL", engine.url.render_as_string(False))
        monkeypatch.setenv("TORCHYARD_QUEUE_RESEND_SECONDS", "30")
        db.get_engine().dispose()
        caches = (settings.get_settings, db.get_engine, db.get_sessionmaker)
        for cached in caches:
            cached.cache_clear()
        try:
            yield engine
        finally:
            db.get_engine().dispose()
            monkeypatch.undo()
            for cached in caches:
                cached.cache_clear()


def queued_run(engine: Engine, pool: str = "local") -> int:
    with Session(engine) as session:
        user = User(username=f"d-{os.urandom(4).hex()}", password_hash="-")
        session.add(user)
        session.flush()
        exp = Experiment(name="d", config={}, owner_id=user.id)
        session.add(exp)
        session.flush()
        config = {
            "recipe": "tiny_mlp",
            "params": {},
            "seed": 1,
            "resources": {"gpus": 1, "pool": pool},
        }
        run_id = queue(session, experiment_id=exp.id, owner_id=user.id, config=config).id
        session.info.pop("after_commit")  # its first message "lost": never sent
        session.commit()
    return run_id


def age(engine: Engine, run_id: int, seconds: float) -> None:
    """The run's task last came by ``seconds`` ago."""
    with Session(engine) as session:
        seen = utcnow() - timedelta(seconds=seconds)
        session.execute(update(Run).where(Run.id == run_id).values(task_seen_at=seen))
        session.commit()


def live_host(engine: Engine, pool: str = "local") -> None:
    with Session(engine) as session:
        touch_host(session, host=f"box-{pool}", gpus=[0], now=utcnow(), pool=pool)
        session.commit()


def sent_messages(pool: str = "local") -> list[list[int]]:
    """Every run message on the broker in the pool's queue, taken off it (as a worker
    would)."""
    found = []
    with celery_app.connection_for_read() as conn:
        queue = conn.SimpleQueue(pool_queue(pool))
        while True:
            try:
                message = queue.get(block=False)
            except queue.Empty:
                break
            message.ack()
            if message.headers.get("task") == RUN_TASK:
                found.append(list(message.payload[0]))
        queue.close()
    return found


def dispatch_of(engine: Engine, run_id: int) -> int:
    with Session(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.dispatch


def test_a_run_not_seen_for_the_limit_is_sent_again_once_and_its_old_message_dropped(
    own_db: Engine,
) -> None:
    sent_messages()  # whatever earlier tests left on the in-memory broker
    fresh, lost = queued_run(own_db), queued_run(own_db)
    age(own_db, lost, 31)
    live_host(own_db)

    assert resend_lost() == [lost]
    assert resend_lost() == []  # seen just now: not again
    assert sent_messages() == [[lost, 1]]
    assert dispatch_of(own_db, lost) == 1 and dispatch_of(own_db, fresh) == 0
    # The lost message, found after all: dropped; the new one is the run's.
    assert current_message(lost, 0) is False
    assert current_message(lost, 1) is True


def test_nothing_is_resent_while_no_worker_is_live(own_db: Engine) -> None:
    sent_messages()
    run_id = queued_run(own_db)
    age(own_db, run_id, 600)
    assert resend_lost() == []
    assert sent_messages() == [] and dispatch_of(own_db, run_id) == 0


def test_a_lost_run_is_sent_again_to_its_pools_queue_once_that_pool_has_a_live_worker(
    own_db: Engine,
) -> None:
    sent_messages()
    sent_messages("gpu-b")
    run_id = queued_run(own_db, "gpu-b")
    age(own_db, run_id, 600)
    live_host(own_db)  # a worker of the local pool only: nobody would take it
    assert resend_lost() == []
    live_host(own_db, "gpu-b")
    assert resend_lost() == [run_id]
    assert sent_messages("gpu-b") == [[run_id, 1]] and sent_messages() == []


def test_a_come_by_keeps_a_waiting_run_from_being_resent(own_db: Engine) -> None:
    sent_messages()
    run_id = queued_run(own_db)
    age(own_db, run_id, 31)
    live_host(own_db)
    assert current_message(run_id, 0) is True  # its task came by: the message lives
    assert resend_lost() == []


def test_a_run_whose_message_never_reached_the_broker_is_sent_in_the_next_round(
    own_db: Engine,
) -> None:
    # task_seen_at NULL: the broker refused the message when the run was queued (issue 39);
    # it is sent at once, not after queue_resend_seconds, and then once only.
    sent_messages()
    run_id = queued_run(own_db)
    with Session(own_db) as session:
        session.execute(update(Run).where(Run.id == run_id).values(task_seen_at=None))
        session.commit()
    live_host(own_db)
    assert resend_lost() == [run_id]
    assert resend_lost() == []
    assert sent_messages() == [[run_id, 1]]


def test_copies_of_a_runs_current_message_past_one_are_surplus_keeping_a_waiting_one() -> None:
    """A Redis restarted with its data: the run's taken copy came back beside the one the
    worker put back in the queue (CI: two of each of three queued runs' messages lasted)."""
    taken = RunMessage(run_id=7, dispatch=2, waiting=False, key=b"tag-1")
    queued = RunMessage(run_id=7, dispatch=2, waiting=True, key=b"item")
    again = RunMessage(run_id=7, dispatch=2, waiting=True, key=b"item")
    alone = RunMessage(run_id=8, dispatch=0, waiting=False, key=b"tag-2")
    assert surplus([taken, queued, alone]) == [taken]
    assert surplus([queued, again]) == [again]
    assert surplus([alone]) == []
