"""DELETE /api/runs/{id} and /api/experiments/{id}: everything of the run goes and the disk is
freed, never while it runs, never another user's, never through a link; disk use shown."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from app.auth.models import User
from app.db import session_scope
from app.metrics.ingest import ingest_steps
from app.metrics.models import Metric, MetricKey
from app.runs import deletion
from app.runs.models import Checkpoint, Run, RunLogChunk, RunParam
from app.settings import get_settings
from tests.conftest import make_user
from tests.factories import add_run

TINY = {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 3}


def _user() -> tuple[int, dict[str, str]]:
    username, _password, headers = make_user()
    with session_scope() as session:
        user_id = session.scalar(select(User.id).where(User.username == username))
    assert user_id is not None
    return user_id, headers


def _run(owner_id: int, status: str = "succeeded", experiment_id: int | None = None) -> int:
    with session_scope() as session:
        run_id = add_run(session, owner_id=owner_id, config=TINY, status=status)
        if experiment_id is not None:
            run = session.get(Run, run_id)
            assert run is not None
            run.experiment_id = experiment_id
    return run_id


def _experiment_of(run_id: int) -> int:
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.experiment_id


def _fill(run_id: int, points: int) -> int:
    """Points, a log chunk, a param, a checkpoint and files; returns the files' bytes."""
    with session_scope() as session:
        steps = [(s, 1.0, {"train/loss": 1.0 / s, "val/acc": 0.5}) for s in range(1, points + 1)]
        ingest_steps(session, run_id=run_id, steps=steps)
        session.add(RunLogChunk(run_id=run_id, offset=0, data=b"hello\n"))
        session.add(RunParam(run_id=run_id, key="params.lr", source="config", value=0.1))
        session.add(
            Checkpoint(
                run_id=run_id,
                name="epoch-0001.pt",
                epoch=1,
                step=10,
                size_bytes=1000,
                path="checkpoints/epoch-0001.pt",
            )
        )
    run_dir = get_settings().run_dir(run_id)
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "epoch-0001.pt").write_bytes(b"c" * 1000)
    (run_dir / "output.log").write_bytes(b"hello\n")
    return 1006


def _count(model, **where) -> int:
    with session_scope() as session:
        stmt = select(func.count()).select_from(model)
        for column, value in where.items():
            stmt = stmt.where(getattr(model, column) == value)
        return int(session.scalar(stmt) or 0)


def test_delete_run_frees_its_folder_points_logs_and_checkpoints(client) -> None:
    owner_id, headers = _user()
    run_id = _run(owner_id)
    files = _fill(run_id, deletion.POINTS_BATCH + 5_000)  # more than one batch of points
    with session_scope() as session:
        key_ids = list(session.scalars(select(MetricKey.id).where(MetricKey.run_id == run_id)))
    assert client.get(f"/api/runs/{run_id}", headers=headers).json()["disk_bytes"] == 1000

    r = client.delete(f"/api/runs/{run_id}", headers=headers)

    assert r.status_code == 204, r.text
    assert r.headers["X-Freed-Bytes"] == str(files)
    assert not get_settings().run_dir(run_id).exists()
    with session_scope() as session:
        points = session.scalar(
            select(func.count()).select_from(Metric).where(Metric.key_id.in_(key_ids))
        )
    assert points == 0
    for model in (MetricKey, Checkpoint, RunLogChunk, RunParam):
        assert _count(model, run_id=run_id) == 0, model
    assert _count(Run, id=run_id) == 0
    assert client.get(f"/api/runs/{run_id}", headers=headers).status_code == 404


@pytest.mark.parametrize("status", ["queued", "running"])
def test_delete_refuses_a_run_that_has_not_ended(client, status: str) -> None:
    owner_id, headers = _user()
    run_id = _run(owner_id, status=status)
    get_settings().run_dir(run_id).mkdir(parents=True)

    r = client.delete(f"/api/runs/{run_id}", headers=headers)

    assert r.status_code == 409
    assert "cancel it first" in r.json()["detail"] and f"run {run_id}" in r.json()["detail"]
    assert _count(Run, id=run_id) == 1 and get_settings().run_dir(run_id).is_dir()


def test_another_user_may_not_delete_but_an_admin_may(client) -> None:
    owner_id, _headers = _user()
    run_id = _run(owner_id)
    _other_id, other = _user()
    viewer = make_user(role="viewer")[2]
    admin = make_user(admin=True)[2]

    assert client.delete(f"/api/runs/{run_id}", headers=other).status_code == 403
    assert client.delete(f"/api/runs/{run_id}", headers=viewer).status_code == 403
    exp = _experiment_of(run_id)
    assert client.delete(f"/api/experiments/{exp}", headers=other).status_code == 403
    assert _count(Run, id=run_id) == 1
    assert client.delete(f"/api/runs/{run_id}", headers=admin).status_code == 204


def test_delete_never_follows_a_link_the_job_left(client, tmp_path: Path) -> None:
    owner_id, headers = _user()
    run_id = _run(owner_id)
    run_dir = get_settings().run_dir(run_id)
    (run_dir / "work" / "closed").mkdir(parents=True)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (run_dir / "work" / "etc").symlink_to("/etc")
    (run_dir / "work" / "precious").symlink_to(outside)
    (run_dir / "work" / "file-link").symlink_to(outside / "keep.txt")
    (run_dir / "work" / "closed" / "inner.bin").write_bytes(b"x" * 10)
    os.mkfifo(run_dir / "work" / "fifo")
    (run_dir / "work" / "closed").chmod(0)  # the job locked a folder

    r = client.delete(f"/api/runs/{run_id}", headers=headers)

    assert r.status_code == 204, r.text
    assert r.headers["X-Freed-Bytes"] == "10"  # links count nothing
    assert not run_dir.exists()
    assert (outside / "keep.txt").read_text() == "mine"
    assert Path("/etc/passwd").is_file()


def test_delete_refuses_while_another_run_resumes_from_a_checkpoint(client) -> None:
    owner_id, headers = _user()
    parent = _run(owner_id)
    child = _run(owner_id, status="queued", experiment_id=_experiment_of(parent))
    with session_scope() as session:
        row = session.get(Run, child)
        assert row is not None
        row.resume_from = f"{parent}/checkpoints/epoch-0001.pt"

    r = client.delete(f"/api/runs/{parent}", headers=headers)

    assert r.status_code == 409
    assert f"run {child} resumes from {parent}/checkpoints/epoch-0001.pt" in r.json()["detail"]
    assert _count(Run, id=parent) == 1


def test_delete_experiment_names_its_active_runs_then_deletes_them_all(client) -> None:
    owner_id, headers = _user()
    first = _run(owner_id)
    exp = _experiment_of(first)
    second = _run(owner_id, experiment_id=exp)
    running = _run(owner_id, status="running", experiment_id=exp)
    _fill(first, 10)
    _fill(second, 10)

    r = client.delete(f"/api/experiments/{exp}", headers=headers)
    assert r.status_code == 409 and f"run {running} (running)" in r.json()["detail"]
    assert _count(Run, experiment_id=exp) == 3

    with session_scope() as session:  # it ends (the test stands in for its worker)
        session.execute(delete(Run).where(Run.id == running))
    listed = client.get("/api/experiments", headers=headers).json()
    assert next(e for e in listed if e["id"] == exp)["disk_bytes"] == 2000
    assert client.get("/api/users/me", headers=headers).json()["disk_bytes"] == 2000

    r = client.delete(f"/api/experiments/{exp}", headers=headers)

    assert r.status_code == 204, r.text
    assert r.headers["X-Freed-Bytes"] == str(2 * 1006)
    assert _count(Run, experiment_id=exp) == 0
    assert client.get(f"/api/experiments/{exp}", headers=headers).status_code == 404
    assert not get_settings().run_dir(first).exists()
    assert not get_settings().run_dir(second).exists()
    assert client.get("/api/users/me", headers=headers).json()["disk_bytes"] == 0


def test_disk_use_is_the_measured_folder_once_the_run_has_ended(client) -> None:
    owner_id, headers = _user()
    run_id = _run(owner_id)
    _fill(run_id, 3)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.disk_bytes = 123_456
    assert client.get(f"/api/runs/{run_id}", headers=headers).json()["disk_bytes"] == 123_456
