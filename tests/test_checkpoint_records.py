"""app.runs.files.checkpoint_records, the one writer of checkpoint rows: recording, retention's
drops, and the artifact store's URIs. Each test works in one transaction, rolled back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.artifacts import checkpoint_key, store_fs
from app.metrics.ingest import ingest_points
from app.runs.files import checkpoint_records
from app.runs.service import checkpoints_of
from tests.factories import admin_run


def line(name: str, step: int, *, path: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "epoch": step // 10,
        "step": step,
        "size_bytes": 100,
        "path": path or f"checkpoints/{name}",
    }


def names(db: Session, run_id: int) -> list[str]:
    return [c.name for c in checkpoints_of(db, run_id=run_id)]


def test_a_checkpoint_is_recorded_once_however_often_its_line_is_replayed(db: Session) -> None:
    run_id = admin_run(db)
    first = [line("epoch-0001.pt", 10), line("epoch-0001.pt", 10), line("epoch-0002.pt", 20)]
    checkpoint_records.record(db, run_id=run_id, records=first)
    checkpoint_records.record(db, run_id=run_id, records=[line("epoch-0002.pt", 20)])
    db.flush()
    assert names(db, run_id) == ["epoch-0001.pt", "epoch-0002.pt"]
    saved = checkpoints_of(db, run_id=run_id)[1]
    assert (saved.epoch, saved.step, saved.size_bytes) == (2, 20, 100)


def test_retention_drops_rows_the_policy_does_not_keep_and_ranks_by_the_metric(
    db: Session, tmp_path: Path
) -> None:
    config = {"checkpoints": {"keep_last": 1, "keep_best": 1, "metric": "acc", "mode": "max"}}
    run_id = admin_run(db, config)
    steps = [10, 20, 30, 40]
    checkpoint_records.record(
        db,
        run_id=run_id,
        records=[line(f"e{s}.pt", s) for s in steps] + [line("final.pt", 40)],
    )
    values = {10: 0.5, 20: 0.9, 30: 0.1, 40: 0.2}
    ingest_points(db, run_id=run_id, points=[("acc", s, v, 0.0) for s, v in values.items()])
    dropped = checkpoint_records.apply_retention(db, run_id=run_id, run_dir=tmp_path)
    assert sorted(dropped) == ["e10.pt", "e30.pt"]  # e20 is the best, e40 the last
    assert names(db, run_id) == ["e20.pt", "e40.pt", "final.pt"]
    assert checkpoint_records.apply_retention(db, run_id=run_id, run_dir=tmp_path) == []


def test_retention_of_a_missing_run_drops_nothing(db: Session, tmp_path: Path) -> None:
    assert checkpoint_records.apply_retention(db, run_id=2**31 - 2, run_dir=tmp_path) == []


def test_uploads_are_recorded_and_a_dropped_one_is_removed_from_the_store(
    db: Session, tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    run_id = admin_run(db)
    checkpoint_records.record(
        db, run_id=run_id, records=[line("a.pt", 1), line("b.pt", 2, path="./sub/b.pt")]
    )
    db.flush()
    assert checkpoint_records.awaiting_upload(db, run_id=run_id) == [
        ("a.pt", "checkpoints/a.pt"),
        ("b.pt", "./sub/b.pt"),
    ]
    fs, root = store_fs(store)
    uri_a = str(fs.unstrip_protocol(checkpoint_key(root, run_id, "a.pt")))
    assert checkpoint_records.record_upload(db, run_id=run_id, name="a.pt", uri=uri_a, store=store)
    assert checkpoint_records.awaiting_upload(db, run_id=run_id) == [("b.pt", "./sub/b.pt")]
    assert checkpoint_records.stored_uri(db, run_id=run_id, path="checkpoints/a.pt") == uri_a
    assert checkpoint_records.stored_uri(db, run_id=run_id, path="sub/b.pt") is None

    gone = checkpoint_key(root, run_id, "gone.pt")  # uploaded, but its row was dropped meanwhile
    fs.makedirs(gone.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(gone, b"weights")
    uri_gone = str(fs.unstrip_protocol(gone))
    assert not checkpoint_records.record_upload(
        db, run_id=run_id, name="gone.pt", uri=uri_gone, store=store
    )
    assert not fs.exists(gone)
