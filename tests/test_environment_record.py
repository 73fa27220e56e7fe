"""app.runs.files.environment_record, the one writer of a run's reproducibility record: the
worker's half stored at launch, the job's folded in under it. One transaction per test,
rolled back."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.runs.files import environment_record
from app.runs.models import Run
from tests.factories import admin_run


def environment(db: Session, run_id: int) -> object:
    return db.scalar(select(Run.environment).where(Run.id == run_id))


def test_the_job_half_is_folded_in_and_the_worker_half_wins_a_shared_key(db: Session) -> None:
    run_id = admin_run(db)
    worker = {"hostname": "gpu-box", "gpu_indices": [0]}
    environment_record.store(db, run_id=run_id, record=worker)
    job = {"torch": "2.13.0", "hostname": "forged", "packages": {"numpy": "2.0"}}
    environment_record.merge_job_half(db, run_id=run_id, job=job)
    db.expire_all()
    assert environment(db, run_id) == {
        "torch": "2.13.0",
        "packages": {"numpy": "2.0"},
        "hostname": "gpu-box",
        "gpu_indices": [0],
    }


def test_a_job_half_before_the_worker_half_is_stored_as_it_is(db: Session) -> None:
    run_id = admin_run(db)
    environment_record.merge_job_half(db, run_id=run_id, job={"torch": "2.13.0"})
    db.expire_all()
    assert environment(db, run_id) == {"torch": "2.13.0"}


def test_a_missing_run_is_left_alone(db: Session) -> None:
    environment_record.merge_job_half(db, run_id=2**31 - 2, job={"torch": "x"})
    environment_record.store(db, run_id=2**31 - 2, record={"hostname": "h"})
