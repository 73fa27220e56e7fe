"""app.runs.files.ingest_offsets, the one writer of the forwarder's offsets on a run: the spool's,
each TensorBoard file's, and what a batch kept out. Each test in the rolled-back `db` session."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.runs.files import ingest_offsets
from app.runs.models import Run
from app.runs.state import notices
from tests.factories import admin_run

MISSING = 2**31 - 2


def test_offsets_start_at_nothing_and_advance(db: Session) -> None:
    run_id = admin_run(db)
    assert ingest_offsets.metrics_offset(db, run_id=run_id) == 0
    assert ingest_offsets.tensorboard_offsets(db, run_id=run_id) == {}
    ingest_offsets.advance_metrics(db, run_id=run_id, offset=120, skipped={})
    ingest_offsets.advance_tensorboard(db, run_id=run_id, offsets={"tb/events.1": 64})
    db.expire_all()
    assert ingest_offsets.metrics_offset(db, run_id=run_id) == 120
    assert ingest_offsets.tensorboard_offsets(db, run_id=run_id) == {"tb/events.1": 64}


def test_what_a_batch_kept_out_adds_up_on_the_run(db: Session) -> None:
    run_id = admin_run(db)
    ingest_offsets.advance_metrics(db, run_id=run_id, offset=10, skipped={"not JSON": 2})
    ingest_offsets.advance_metrics(db, run_id=run_id, offset=20, skipped={"not JSON": 1})
    ingest_offsets.note_dropped_points(db, run_id=run_id, limit=3, points=5)
    ingest_offsets.note_dropped_points(db, run_id=run_id, limit=3, points=0)
    db.expire_all()
    run = db.get(Run, run_id)
    assert run is not None
    assert run.notices == {"skipped": {"not JSON": 3}, "keys": {"limit": 3, "points": 5}}
    assert notices.notice_lines(run.notices)


def test_a_new_attempt_restarts_the_spool_and_skips_what_the_event_files_hold(db: Session) -> None:
    run_id = admin_run(db)
    ingest_offsets.advance_metrics(db, run_id=run_id, offset=500, skipped={})
    ingest_offsets.advance_tensorboard(db, run_id=run_id, offsets={"a": 1})
    ingest_offsets.restart(db, run_id=run_id, tensorboard={"a": 9, "b": 4})
    db.expire_all()
    assert ingest_offsets.metrics_offset(db, run_id=run_id) == 0
    assert ingest_offsets.tensorboard_offsets(db, run_id=run_id) == {"a": 9, "b": 4}


def test_a_missing_run_has_no_offsets_and_nothing_is_written(db: Session) -> None:
    assert ingest_offsets.metrics_offset(db, run_id=MISSING) is None
    assert ingest_offsets.tensorboard_offsets(db, run_id=MISSING) is None
    ingest_offsets.advance_metrics(db, run_id=MISSING, offset=1, skipped={"x": 1})
    ingest_offsets.advance_tensorboard(db, run_id=MISSING, offsets={"a": 1})
    ingest_offsets.note_dropped_points(db, run_id=MISSING, limit=1, points=1)
    ingest_offsets.restart(db, run_id=MISSING, tensorboard={})
