"""app.runs.environment_record, the one writer of a run's reproducibility record: the
worker's half stored at launch, the job's folded in under it. One transaction per test,
rolled back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.runs import environment_record
from app.runs.models import Run
from tests.factories import add_run, admin_id, rolled_back


@pytest.fixture
def session() -> Iterator[Session]:
    with rolled_back() as session:
        yield session


def environment(session: Session, run_id: int) -> object:
    return session.scalar(select(Run.environment).where(Run.id == run_id))


def test_the_job_half_is_folded_in_and_the_worker_half_wins_a_shared_key(
    session: Session,
) -> None:
    run_id = add_run(session, owner_id=admin_id(session))
    worker = {"hostname": "gpu-box", "gpu_indices": [0]}
    environment_record.store(session, run_id=run_id, record=worker)
    job = {"torch": "2.13.0", "hostname": "forged", "packages": {"numpy": "2.0"}}
    environment_record.merge_job_half(session, run_id=run_id, job=job)
    session.expire_all()
    assert environment(session, run_id) == {
        "torch": "2.13.0",
        "packages": {"numpy": "2.0"},
        "hostname": "gpu-box",
        "gpu_indices": [0],
    }


def test_a_job_half_before_the_worker_half_is_stored_as_it_is(session: Session) -> None:
    run_id = add_run(session, owner_id=admin_id(session))
    environment_record.merge_job_half(session, run_id=run_id, job={"torch": "2.13.0"})
    session.expire_all()
    assert environment(session, run_id) == {"torch": "2.13.0"}


def test_a_missing_run_is_left_alone(session: Session) -> None:
    environment_record.merge_job_half(session, run_id=2**31 - 2, job={"torch": "x"})
    environment_record.store(session, run_id=2**31 - 2, record={"hostname": "h"})
